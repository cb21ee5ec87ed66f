"""Index arithmetic, in one place: the normal form of integer expressions (`linear`), the
rewrite-rule simplifier (`simplify`), the bounds prover (`prover`) and exact evaluation over
known sizes (`evaluate`). The checker, the passes, the reference, the size binder and the
kernels' region check all use these, so they agree on what an index expression is."""
