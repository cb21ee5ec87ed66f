"""What schedule directives do to stages, apart from the lowering passes: the stage graph
they build (`stage_graph`), the checks they share (`checks`), the layout directives
(`layout`: pad, pack, storage_align) and the tensorize match (`tensorize`). The passes
`apply_schedule` and `build_nests` use them."""
