"""The graph level: a model as op calls on named values, and the passes over it.

    checked graph (`ir.Graph`) ──fold──▶ ──fuse──▶ groups ──compose──▶ one te.Function
                                                                        per group
                                          ──memory──▶ one arena plan for the intermediates

Each pass is a module with one entry point: `patterns.classify` (an op's kind read off its
tensor expression), `fold.run` (constant folding, batch_norm into conv), `fuse.run`
(grouping by the TVM paper's rules), `compose.run` (a group's fused tensor expression),
`memory.run` (static memory planning by liveness).
"""
