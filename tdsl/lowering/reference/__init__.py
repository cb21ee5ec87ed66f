"""The reference evaluator: the tensor-expression IR's semantics, with numpy.

`semantics.evaluate` runs a function (argument checks, sizes, stages in order); `stage`
evaluates one stage's expression on a grid of its axes; `views` turns subscripts into
strided views or checked gathers."""
