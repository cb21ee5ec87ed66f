"""Data-layout transformation: activations between convolutions in NCHW[x]c.

On a CPU with vectors of ``lanes`` floats, a blocked layout ``X[n, c // x, h, w, c % x]``
(TVM's NCHWc, x = lanes) lets a convolution read and write whole vectors of channels, and
an epilogue fused into it (bias, relu, a residual add) run on them. This pass rewrites, in
program order:

- a standard ``conv2d`` whose output channels are a multiple of ``lanes`` to
  ``conv2d_winograd4_nchwc`` or ``conv2d_winograd_nchwc`` where it is 3x3 with padding 1
  and stride 1, its input is blocked by ``lanes``, and it is large enough to pay (below,
  `winograd_tiles`) (Winograd's F(4x4, 3x3) and F(2x2, 3x3): 4x and 2.25x fewer
  multiplications; the weights through ``winograd4_weights`` / ``winograd_weights``,
  folded at build time), else to
  ``conv2d_nchwc`` (``conv2d_nchwc_valid`` without padding: no padded copy of the input),
  its output blocked by ``lanes``, its input by ``lanes`` or, where ``lanes`` does not divide
  its channels (an RGB image), by 1; the weights through ``pack_conv_weights``, a
  weight-only node that constant folding computes at build time;
- a standard ``depthwise_conv2d`` whose channels are a multiple of ``lanes`` to
  ``depthwise_conv2d_nchwc`` (weights through ``pack_depthwise_weights``, folded too);
- a standard ``qlinear_conv2d`` (u8 activations, i8 weights) to ``qlinear_conv2d_nchwc`` on
  u8 activations blocked as f32's are, or by 64 (``TILE_BLOCK``) where the target sums int8
  products in AMX tiles and its channels and filters are multiples of 64 (weights through
  ``pack_qconv_weights``);
- a standard ``conv2d_i16`` (an int8 convolution's centred values on x86 without VNNI) to
  ``conv2d_nchwc_i16`` on i16 activations blocked as f32's are (an even block: the i16 dot
  product's pairs), its i32 sums blocked too (weights through ``pack_conv_weights_i16``);
- ops on a blocked value that have a blocked form: ``bias_add``, ``batch_norm`` and
  ``scale_shift`` (their per-channel vectors through ``pack_channels``), elementwise ops
  (any op whose every input is read at the output's own indices, re-instantiated at rank
  5: relu, add, clip ...), ops of 4-D values and per-channel vectors read at the output's
  channel (`blocked_channels`: an imported requantization), ``max_pool2d`` (and its u8
  form ``max_pool2d_u8``) and ``global_avg_pool2d`` (whose result is a plain ``[N, C]``);
- a standard ``dense`` whose weights are a parameter to ``dense_packed``, the weights through
  ``pack_dense_weights`` (panels of 2 x lanes output features, its schedule's tile width),
  folded at build time: dense's own schedule packs them on every call;
- and inserts ``to_nchwc``/``from_nchwc`` only at the graph's edges (its inputs and outputs)
  and in front of an op that has no blocked form, once per value.

Sizes are concrete here (the graph is compiled at known sizes), so new values have constant
shapes. Returns the new graph, a ``{value: layout}`` map for the 4- and 5-D values (what
``tdsl graph`` prints) and notes in words.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ...errors import TdslError
from .. import te
from ..dtypes import INDEX, to_numpy
from .ir import Graph, Node, Value, eval_size
from .patterns import Pattern, classify, reads_elementwise


# Where Winograd's F(2x2, 3x3) pays over the direct sum, measured at one image on AVX-512
# (conv2d_winograd_nchwc's default schedule against conv2d_nchwc's, C -> C channels x size):
# 1.3-1.95x from 16 x 32 x 32 and 32 x 16 x 16 to 128 x 28 x 28 and 256 x 14 x 14, 1.5x at
# 128 x 8 x 8; 0.67x at 64 x 7 x 7 (4 x 4 tiles for 49 outputs, 30% of the work thrown away).
# With 512 channels it lost 0.78x at 512 x 14 x 14 before the products of all tiles were
# made at once (the schedule's knob whole; with it 1.9x, session 28) and 0.78x at 512 x 7
# x 7 still (2.70 ms against 2.11) while the transformed weights had the channels
# outermost: a block of filters was 256 bytes of each 2 KiB row, a stride the prefetchers
# did not follow. With the filter blocks outermost
# (`winograd_weights`, session 28, Zen 4, one thread, the weights out of cache, ms):
#       layer          direct   F(2x2)       x86-64-v3: direct   F(2x2)
#       512 x 7 x 7     2.13    1.65-1.75               2.46       1.61
#       512 x 14 x 14   8.35    4.27                    8.83       5.32
#       256 x 7 x 7     0.60    0.67
#       128 x 7 x 7     0.18    0.22
# so at 7 x 7 only from 512 -> 512 channels (WINOGRAD_WIDE), where the products outweigh
# the transforms; 1024 channels (64 MiB) were not measured and keep the direct sum. In
# ResNet-50 (AVX-512, one thread, rounds interleaved): 63.3-64.1 -> 60.4-61.5 ms, its
# 256 x 14 x 14 layers 1.15-1.43 -> 1.0-1.1 ms each by the layout.
# F(4x4, 3x3) (conv2d_winograd4_nchwc: 36 products per 16 outputs, 4x fewer multiplications
# than the direct sum, 1.78x fewer than F(2x2)) against F(2x2) and the direct sum, each
# op's default schedule, C -> C channels x size, one image, one thread on AVX-512, the best
# of 5-7 rounds of calls each made after 64 MiB of other data were written (the weights out
# of cache, as in a model), 2026-12-06 (ms):
#       layer          direct   F(2x2)   F(4x4)
#       64 x 56 x 56    2.10     1.65     1.10
#       128 x 28 x 28   2.13     1.43     0.92
#       256 x 14 x 14   2.32     1.73-1.9  1.6 on a quiet host, 2.9-6.5 with other
#                                         processes on the memory bus (36 * C * F floats,
#                                         9.4 MiB, streamed from memory once per call)
#       512 x 7 x 7     2.15     5.7      4.9  (37.7 MiB of transformed weights: 8 GB/s)
#       128 x 14 x 14   0.54-0.59 0.45    0.52
#       64 x 12 x 12    0.12     0.094    0.099
#       64 x 10 x 10    0.10     0.088    0.11
#       64 x 8 x 8      0.061    0.060    0.061
#       32 x 16 x 16    0.077    0.074    0.072
# F(4x4) wins by 1.5x from 28 x 28, where the products dominate; below, its transforms (6x6
# tiles, up to 44% of them past the image at 10 x 10) cost what the products save. So
# F(4x4) from 28 rows and columns and within F(2x2)'s weight limit (36 * C * F floats:
# 128 -> 128 channels is 2.25 MiB), F(2x2) from 8 within its limit, the direct sum below
# and above. (The 512 x 7 x 7 row was measured with the channels-outermost layout.)
WINOGRAD_MIN_SIZE = 8                   # output rows and columns
WINOGRAD_WIDE_MIN_SIZE = 7              # F(2x2) with WINOGRAD_WIDE channels x filters
WINOGRAD_WIDE = 512 * 512
WINOGRAD4_MIN_SIZE = 28
WINOGRAD4_MAX_WEIGHT_BYTES = 4 << 20    # the transformed weights, 36 * C * F floats
WINOGRAD_MAX_WEIGHT_BYTES = 16 << 20    # and F(2x2)'s, 16 * C * F floats (512 -> 512)

# int8 activations' channel block where the target sums int8 products in AMX tiles: a
# tile's row is 64 bytes, the 64 channels of one pixel (`qlinear_conv2d_nchwc`'s tiles)
TILE_BLOCK = 64

# the layout conversions of each element type a blocked value may have: NCHW to blocked,
# blocked to NCHW (u8: the int8 convolutions' activations; i16 and i32: conv2d_i16's input
# and sums)
_CONVERSIONS = {"f32": ("to_nchwc", "from_nchwc"), "u8": ("to_nchwc_u8", "from_nchwc_u8"),
                "i16": ("to_nchwc_i16", "from_nchwc_i16"),
                "i32": ("to_nchwc_i32", "from_nchwc_i32")}

# the convolutions that block their input, by the multiple of channels its block must be
# (the int8 dot product's groups of 4, the i16 one's pairs)
_BLOCKING = {"conv2d": 1, "qlinear_conv2d": 4, "conv2d_i16": 2}

# max pools (f32, u8) and their blocked forms
MAX_POOLS = {"max_pool2d": "max_pool2d_nchwc", "max_pool2d_u8": "max_pool2d_nchwc_u8"}

# a per-channel vector [C] as [C / block, block], by its type
_PACK_CHANNELS = {"f32": "pack_channels", "i32": "pack_channels_i32"}

# per-channel ops (an NCHW input and [C] vectors) and their blocked forms
PER_CHANNEL = {"bias_add": "bias_add_nchwc", "batch_norm": "batch_norm_nchwc",
               "scale_shift": "scale_shift_nchwc"}


def run(graph: Graph, std: Callable[[str], object], graph_sizes: dict[str, int],
        lanes: int, winograd: bool = True, int8_tiles: bool = False,
        ) -> tuple[Graph, dict[str, str], tuple[str, ...]]:
    """``int8_tiles``: the target sums int8 products in AMX tiles (`Target.amx`)."""
    return _Rewriter(graph, std, graph_sizes, lanes, winograd, int8_tiles).run()


def winograd_tiles(size: tuple[int, int], channels: int, filters: int) -> int | None:
    """The output tile of the Winograd algorithm for a 3x3, stride-1, padding-1
    convolution of this output ``size`` (rows, columns) and channels: 4 for F(4x4, 3x3), 2
    for F(2x2, 3x3), None for the direct sum (the table above)."""
    wide = channels * filters >= WINOGRAD_WIDE
    for tile, min_size, products, max_bytes in (
            (4, WINOGRAD4_MIN_SIZE, 36, WINOGRAD4_MAX_WEIGHT_BYTES),
            (2, WINOGRAD_WIDE_MIN_SIZE if wide else WINOGRAD_MIN_SIZE, 16,
             WINOGRAD_MAX_WEIGHT_BYTES)):
        if min(size) >= min_size and products * channels * filters * 4 <= max_bytes:
            return tile
    return None


def layout_name(shape: tuple[int, ...]) -> str | None:
    """``NCHW`` for a 4-D activation, ``NCHW16c`` for a blocked one, None otherwise."""
    if len(shape) == 4:
        return "NCHW"
    if len(shape) == 5:
        return f"NCHW{shape[4]}c"
    return None


def blocked_channels(fn: te.Function, block: int):
    """``fn``, one stage of a 4-D output, rewritten onto NCHW[block]c: each input read with
    the output's channel axis ``c`` must be 4-D with the output's channels and have ``c``
    as its channel index and nowhere else, so its reads become ``[..., c // block, ...,
    c % block]`` with both parts new axes (TVM's layout inference for broadcast ops), or be
    a vector of the channels read at ``[c]`` (an imported requantization's per-channel
    scales), read as ``[c // block, c % block]`` from a ``pack_channels``'d copy. Its
    other indices stay as written: an input broadcast over the pixels (``S[n, c, 0, 0]``)
    is blocked as ``[N, C / block, 1, 1, block]``, a pooling window as its rows and
    columns. Inputs read without ``c`` stay as they are; ``c`` may appear nowhere else. A
    gathered index (a resize's ``X[n, c, I[y, t], J[x, s]]``) is refused: its bounds check,
    inside the channels' vector loop, kept that loop scalar (U-Net's 8 -> 16 upsampling took
    19.9 us blocked, 12.2 on NCHW). The sizes must be constants (the graph's are, at
    build). Returns the function and, per input, whether it is blocked; None where the form
    does not hold."""
    if len(fn.outputs) != 1 or len(fn.stages()) != 1 or fn.shape_vars:
        return None
    out = fn.outputs[0]
    if out.ndim != 4 or not all(isinstance(d, te.Const) for d in out.shape):
        return None
    n, c, h, w = (ax.var for ax in out.op.axes)
    channels = out.shape[1].value
    if channels % block:
        return None
    reads = list(te.loads(out.op.body))
    by_channel = {ld.tensor for ld in reads if any(c in te.free_vars(i) for i in ld.indices)}
    blocked = {}
    axis_of = {1: 0, 4: 1}          # a by-channel input's channel axis: a [C] vector, NCHW
    for x in by_channel:
        if x.ndim not in axis_of or not all(isinstance(d, te.Const) for d in x.shape) or \
                x.shape[axis_of[x.ndim]].value != channels:
            return None
        cb_ci = (te.const(channels // block, INDEX), te.const(block, INDEX))
        shape = cb_ci if x.ndim == 1 else (x.shape[0], cb_ci[0], *x.shape[2:], cb_ci[1])
        blocked[x] = te.placeholder(x.name, shape, x.dtype)
    if not blocked or \
            any(ld.indices[axis_of[ld.tensor.ndim]] != c or
                any(c in te.free_vars(i) or any(te.loads(i))
                    for k, i in enumerate(ld.indices) if k != axis_of[ld.tensor.ndim])
                for ld in reads if ld.tensor in blocked) or \
            c in te.free_vars(te.rewrite(out.op.body, pre=lambda e: te.const(0, INDEX)
                                         if isinstance(e, te.Load) else None)):
        return None
    cb, ci = te.Var(f"{c.name}_block"), te.Var(f"{c.name}_lane")

    def read(e):
        if isinstance(e, te.Load) and e.tensor in blocked:
            i = e.indices
            at = (cb, ci) if len(i) == 1 else (i[0], cb, i[2], i[3], ci)
            return te.Load(blocked[e.tensor], at, e.dtype)
        return None
    body = te.rewrite(out.op.body, pre=read)
    axes = (te.IterVar(n, out.shape[0]), te.IterVar(cb, te.const(channels // block, INDEX)),
            te.IterVar(h, out.shape[2]), te.IterVar(w, out.shape[3]),
            te.IterVar(ci, te.const(block, INDEX)))
    result = te.Tensor(out.name, tuple(ax.extent for ax in axes), out.dtype,
                       te.Compute(axes, body))
    return (te.Function(fn.name, tuple(blocked.get(x, x) for x in fn.inputs), (result,), (),
                        fn.attrs),
            tuple(x in blocked for x in fn.inputs))


class _Rewriter:
    def __init__(self, graph: Graph, std, graph_sizes, lanes: int, winograd: bool,
                 int8_tiles: bool):
        self.graph, self.std, self.lanes, self.winograd = graph, std, lanes, winograd
        self.int8_tiles = int8_tiles
        self.sizes = graph_sizes
        self.orig = graph.value_map()          # the values as the graph had them (NCHW)
        self.values = dict(self.orig)           # and as rewritten (a blocked one 5-D)
        self.taken = set(self.values)
        self.nodes: list[Node] = []
        self.blocked: dict[str, str] = {}       # an NCHW value -> its NCHW[lanes]c version
        self.plain: dict[str, str] = {}         # a value made blocked -> its NCHW version
        self.edges: dict[tuple[str, int], str] = {}     # (NCHW value, block) -> to_nchwc
        self.subsampled: dict[tuple[str, int], str] = {}    # (blocked value, stride) -> it
        self.notes: list[str] = []
        self.readers: dict[str, list[Node]] = {}
        for n in graph.nodes:
            for v in n.inputs:
                self.readers.setdefault(v, []).append(n)

    def run(self):
        for node in self.graph.nodes:
            if not self._rewrite(node):
                self._keep(node)
        for out in self.graph.outputs:
            if out in self.blocked and out not in self.plain:
                self._from_blocked(out, out)
        graph = dataclasses.replace(
            self.graph, nodes=tuple(self.nodes),
            values=tuple((k, v) for k, v in self.values.items()
                         if k in self._live()))
        layouts = {k: layout_name(self._shape(k)) for k, v in graph.values
                   if v.kind != "param" and layout_name(self._shape(k))}
        return graph, layouts, tuple(self.notes)

    # ------------------------------------------------------------------ the rewrites

    def _rewrite(self, node: Node) -> bool:
        if self._is_std(node, "conv2d"):
            return self._conv(node)
        if self._is_std(node, "depthwise_conv2d"):
            return self._depthwise(node)
        if self._is_std(node, "qlinear_conv2d"):
            return self._qconv(node)
        if self._is_std(node, "conv2d_i16"):
            return self._conv_i16(node)
        if self._is_std(node, "dense"):
            return self._dense(node)
        blocked_in = [v for v in node.inputs if v in self.blocked]
        if len(node.outputs) != 1:
            return False
        if not blocked_in:                  # blocked only for convolutions reading it
            return self._elementwise(node)
        x = node.inputs[0]
        if node.op in PER_CHANNEL and self._is_std(node, node.op) and x in self.blocked:
            vectors = tuple(self._weight_node("pack_channels", v, {"block": self._block(x)},
                                              "_blocked") for v in node.inputs[1:])
            self._emit(PER_CHANNEL[node.op], (self.blocked[x], *vectors), node,
                       dict(node.attrs), blocked=True)
            return True
        if node.op in MAX_POOLS and self._is_std(node, node.op) and x in self.blocked:
            self._emit(MAX_POOLS[node.op], (self.blocked[x],), node, dict(node.attrs),
                       blocked=True)
            return True
        if self._is_std(node, "global_avg_pool2d") and x in self.blocked:
            self._emit("global_avg_pool2d_nchwc", (self.blocked[x],), node, blocked=False)
            return True
        return self._elementwise(node)

    def _conv(self, node: Node) -> bool:
        x, w = node.inputs
        xs, ws = self._orig_shape(x), self._orig_shape(w)
        if len(xs) != 4 or len(ws) != 4 or self._channel_block(ws[0]) is None:
            return False
        c, fb = xs[1], self._channel_block(ws[0])
        if x in self.blocked:
            xb, cin = self.blocked[x], self._block(x)
        else:
            # a partial block (3 lanes of an RGB image) is a short inner loop of every
            # tap: blocks of 1 (NCHW itself) measured 1.5x faster on ResNet-50's stem
            cin = self._channel_block(c) or 1
            xb = self._to_blocked(x, cin)
        attrs = dict(node.attrs)
        tiles = winograd_tiles(xs[2:], c, ws[0]) if self.winograd and \
            cin == fb == self.lanes and tuple(ws[2:]) == (3, 3) and \
            attrs.get("padding", 0) == 1 and attrs.get("stride", 1) == 1 and \
            attrs.get("dilation", 1) == 1 else None
        if tiles is not None:
            four = tiles == 4
            u = self._weight_node("winograd4_weights" if four else "winograd_weights", w,
                                  {"in_block": cin, "out_block": self.lanes}, "_winograd")
            self._emit("conv2d_winograd4_nchwc" if four else "conv2d_winograd_nchwc",
                       (xb, u), node, {}, blocked=True)
            return True
        wp = self._weight_node("pack_conv_weights", w,
                               {"in_block": cin, "out_block": fb}, "_packed")
        if attrs.get("padding", 0) == 0:        # no padded copy of the input to make
            attrs.pop("padding", None)
            if tuple(ws[2:]) == (1, 1) and attrs.get("stride", 1) > 1 and \
                    attrs.get("dilation", 1) == 1:
                xb = self._subsampled(xb, attrs.pop("stride"))
            self._emit("conv2d_nchwc_valid", (xb, wp), node, attrs, blocked=True)
        else:
            self._emit("conv2d_nchwc", (xb, wp), node, attrs, blocked=True)
        return True

    def _qconv(self, node: Node) -> bool:
        """The int8 convolution on blocked u8 activations: input blocks of a multiple of 4
        channels (the dot product's groups), output blocks as f32's; blocks of 64 for both
        where it sums in AMX tiles (`_on_tiles`)."""
        x, w, b, scale = node.inputs
        xs, ws = self._orig_shape(x), self._orig_shape(w)
        tiles = self._on_tiles(node)
        if x in self.blocked:
            xb, cin = self.blocked[x], self._block(x)
        else:
            cin = TILE_BLOCK if tiles else self._channel_block(xs[1])
            xb = None
        # on tiles, the filters in blocks of 64 too: the next convolution's input blocks
        fb = TILE_BLOCK if tiles and cin == TILE_BLOCK else self._channel_block(ws[0])
        if fb is None or cin is None or cin % 4 or w not in self.graph.params:
            return False
        xb = xb or self._to_blocked(x, cin)
        wp = self._weight_node("pack_qconv_weights", w, {"in_block": cin, "out_block": fb},
                               "_packed")
        bb = self._weight_node("pack_channels_i32", b, {"block": fb}, "_blocked")
        sb = self._weight_node("pack_channels", scale, {"block": fb}, "_blocked")
        self._emit("qlinear_conv2d_nchwc", (xb, wp, bb, sb), node, dict(node.attrs),
                   blocked=True)
        return True

    def _conv_i16(self, node: Node) -> bool:
        """The i16 convolution (an int8 one on x86 without VNNI) on blocked i16 inputs, in
        blocks of an even number of channels (the dot product's pairs), its i32 sums
        blocked as f32's."""
        x, w = node.inputs
        xs, ws = self._orig_shape(x), self._orig_shape(w)
        cin = self._block(x) if x in self.blocked else self._channel_block(xs[1])
        fb = self._channel_block(ws[0])
        if fb is None or cin is None or cin % 2:
            return False
        xb = self.blocked[x] if x in self.blocked else self._to_blocked(x, cin)
        wp = self._weight_node("pack_conv_weights_i16", w, {"in_block": cin, "out_block": fb},
                               "_packed")
        self._emit("conv2d_nchwc_i16", (xb, wp), node, dict(node.attrs), blocked=True)
        return True

    def _on_tiles(self, node: Node) -> bool:
        """Whether int8 convolution ``node`` is summed in AMX tiles given blocks of 64 input
        channels (`qlinear_conv2d_nchwc`'s ``tiles`` schedule: 64 channels and 64 filters a
        block)."""
        x, w = node.inputs[:2]
        return self.int8_tiles and self._orig_shape(x)[1] % TILE_BLOCK == 0 and \
            self._orig_shape(w)[0] % TILE_BLOCK == 0

    def _dense(self, node: Node) -> bool:
        x, w, b = node.inputs
        if w not in self.graph.params:
            return False
        wp = self._weight_node("pack_dense_weights", w, {"block": 2 * self.lanes}, "_packed")
        self._emit("dense_packed", (x, wp, b), node, blocked=False)
        return True

    def _depthwise(self, node: Node) -> bool:
        x, w = node.inputs
        xs = self._orig_shape(x)
        block = self._block(x) if x in self.blocked else self._channel_block(xs[1])
        if len(xs) != 4 or block is None or len(self._orig_shape(w)) != 4:
            return False
        xb = self.blocked[x] if x in self.blocked else self._to_blocked(x, block)
        wp = self._weight_node("pack_depthwise_weights", w, {"block": block}, "_packed")
        self._emit("depthwise_conv2d_nchwc", (xb, wp), node, dict(node.attrs), blocked=True)
        return True

    def _elementwise(self, node: Node) -> bool:
        """An op on 4-D values of the output's channels, each read at the output's channel
        index (relu, add, clip; an imported HardSwish; a squeeze-and-excitation scale of
        [N, C, 1, 1] broadcast over the pixels): the same op on blocked inputs."""
        out_shape = self._orig_shape(node.outputs[0])
        blocks = {self._block(v) for v in node.inputs if v in self.blocked} or \
            {self._wanted_block(node)} - {None}
        if len(out_shape) != 4 or len(blocks) != 1 or out_shape[1] % min(blocks) or \
                self.orig[node.outputs[0]].dtype not in _CONVERSIONS:
            return False
        block = blocks.pop()
        out = node.outputs[0]
        if not any(v in self.blocked for v in node.inputs) and \
                _itemsize(self.orig[out].dtype) < max(_itemsize(self.orig[v].dtype)
                                                      for v in node.inputs):
            # an op that narrows its values (a quantize, f32 to u8) on NCHW inputs runs as
            # it is and its result, a quarter of the bytes, is converted: the int8 block's
            # quantize and to_nchwc_u8 took 35 us, to_nchwc and the blocked quantize 50
            self._keep(node)
            self.blocked[out] = self._to_blocked(out, block)
            self.plain[out] = out
            return True
        fn = self._at_rank_5(node)
        on_blocks = (True,) * len(node.inputs)
        if fn is None:
            fn, on_blocks = blocked_channels(node.fn, block) or (None, ())
        vectors = {v for v, b in zip(node.inputs, on_blocks)
                   if b and len(self._orig_shape(v)) == 1}
        if fn is None or any(self.orig[v].dtype not in
                             (_PACK_CHANNELS if v in vectors else _CONVERSIONS)
                             for v, b in zip(node.inputs, on_blocks) if b):
            return False
        inputs = tuple(
            self._weight_node(_PACK_CHANNELS[self.orig[v].dtype], v, {"block": block},
                              "_blocked") if v in vectors
            else (self.blocked[v] if v in self.blocked else self._to_blocked(v, block))
            if b else self._nchw(v) if v in self.blocked else v
            for v, b in zip(node.inputs, on_blocks))
        self._emit(node.op, inputs, node, dict(node.attrs), blocked=True, fn=fn,
                   opdef=node.opdef)
        return True

    def _at_rank_5(self, node: Node):
        """An op of any rank (std's relu, add ...) reading each input, of the output's
        shape, at the output's indices: instantiated at rank 5. None where not."""
        out_shape = self._orig_shape(node.outputs[0])
        if classify(node.fn) != Pattern.INJECTIVE or \
                any(self._orig_shape(v) != out_shape for v in node.inputs) or \
                not all(reads_elementwise(node.fn, k) for k in range(len(node.inputs))):
            return None
        try:
            fn = node.opdef.instantiate(dict(node.attrs), [5] * len(node.inputs))
        except TdslError:       # an op of fixed rank
            return None
        return fn if all(ph.ndim == 5 for ph in fn.inputs) else None

    def _wanted_block(self, node: Node) -> int | None:
        """The block an elementwise op of NCHW inputs takes all the same, because every
        reader of its result is a convolution that will block it (as TVM's layout pass
        moves a transform above elementwise ops; its other readers elementwise ops, blocked
        in turn). An op that narrows its values (an int8 model's QuantizeLinear of its
        input) runs on NCHW all the same, and its result is converted (`_elementwise`).
        None where not."""
        out = node.outputs[0]
        shape = self._orig_shape(out)
        readers = self.readers.get(out, [])
        if len(shape) != 4 or not readers or out in self.graph.outputs:
            return None
        block = self._channel_block(shape[1])
        conv_readers = [r for r in readers if self._is_conv(r)]
        if conv_readers and all(self._is_std(r, "qlinear_conv2d") and self._on_tiles(r)
                                for r in conv_readers):
            block = TILE_BLOCK          # what they take on tiles
        convs = 0
        for r in readers:
            if self._is_conv(r):
                if r.inputs[0] != out or out in r.inputs[1:] or block is None or \
                        block % _BLOCKING[r.op]:
                    return None
                convs += 1
            elif not self._blockable(r):        # another elementwise op: blocked as well
                return None
        return block if convs else None

    def _blockable(self, node: Node) -> bool:
        """An op reading every input at its output's indices, all of one 4-D shape."""
        shape = self._orig_shape(node.outputs[0])
        return len(node.outputs) == 1 and len(shape) == 4 and \
            classify(node.fn) == Pattern.INJECTIVE and \
            all(self._orig_shape(v) == shape for v in node.inputs) and \
            all(reads_elementwise(node.fn, k) for k in range(len(node.inputs)))

    def _keep(self, node: Node) -> None:
        """An op with no blocked form: its blocked inputs are converted back to NCHW."""
        inputs = tuple(self._nchw(v) if v in self.blocked else v for v in node.inputs)
        self.nodes.append(dataclasses.replace(node, inputs=inputs))

    # ------------------------------------------------------------------ helpers

    def _is_std(self, node: Node, name: str) -> bool:
        return node.op == name and node.opdef is self.std(name)

    def _is_conv(self, node: Node) -> bool:
        """A std convolution that blocks its input (`_BLOCKING`)."""
        return any(self._is_std(node, op) for op in _BLOCKING)

    def _shape(self, v: str) -> tuple[int, ...]:
        """The shape of a value of the rewritten graph."""
        return self._eval(self.values[v].shape)

    def _orig_shape(self, v: str) -> tuple[int, ...]:
        """The shape of a value of the graph as given (NCHW)."""
        return self._eval(self.orig[v].shape)

    def _eval(self, shape) -> tuple[int, ...]:
        return tuple(eval_size(d, self.sizes) for d in shape)

    def _block(self, v: str) -> int:
        return self._shape(self.blocked[v])[4]

    def _channel_block(self, channels: int) -> int | None:
        """The block of ``channels`` in the blocked layout: ``lanes``, or where they do
        not divide them a half or a quarter vector of at least 4 (MobileNetV2's 24
        channels on AVX-512 as 3 x 8: the alternative is NCHW and two layout transforms
        around the layer, 14% of that model's time); None for neither."""
        block = self.lanes
        while block >= 4 and block * 4 >= self.lanes:
            if channels % block == 0:
                return block
            block //= 2
        return None

    def _fresh(self, name: str) -> str:
        out, k = name, 1
        while out in self.taken:
            out, k = f"{name}{k}", k + 1
        self.taken.add(out)
        return out

    def _to_blocked(self, v: str, block: int) -> str:
        if (v, block) not in self.edges:
            out = self._fresh(f"{v}_nchw{block}c")
            self._add(_CONVERSIONS[self.values[v].dtype][0], (v,), out, {"block": block})
            self.edges[(v, block)] = out
            self.notes.append(f"to_nchwc {v} -> {out} (NCHW{block}c)")
        return self.edges[(v, block)]

    def _subsampled(self, xb: str, stride: int) -> str:
        """Every ``stride``-th row and column of blocked ``xb``, made once for all the strided
        1x1 convolutions that read it (ResNet v1 has two per downsampling block). One
        thread, ResNet-50's three shortcuts alone, weights out of cache (Zen 4, 2026-12-07),
        stride 1 on the subsampled input against stride 2 on the whole: AVX-512 1.79 ms
        against 2.18 (256 -> 512 at 56x56), 1.95 against 2.23, 1.87 against 1.96; as
        x86-64-v3 code 2.13 against 2.42 and 2.17 against 2.36. The copies take 24-60 us;
        in the model's profile the three with their copies took 5.58 ms against 5.69
        (AVX-512) and 6.05 against 6.59 (x86-64-v3)."""
        if (xb, stride) not in self.subsampled:
            out = self._fresh(f"{xb}_s{stride}")
            self._add("subsample_nchwc", (xb,), out, {"stride": stride})
            self.subsampled[(xb, stride)] = out
            self.notes.append(f"subsample_nchwc {xb} -> {out} (stride {stride})")
        return self.subsampled[(xb, stride)]

    def _nchw(self, v: str) -> str:
        """The NCHW version of blocked ``v`` (a graph output's is the output itself)."""
        if v not in self.plain:
            self._from_blocked(v, v if v in self.graph.outputs else self._fresh(f"{v}_nchw"))
        return self.plain[v]

    def _from_blocked(self, v: str, out: str) -> None:
        self.taken.add(out)
        self._add(_CONVERSIONS[self.values[v].dtype][1], (self.blocked[v],), out, {})
        self.plain[v] = out
        self.notes.append(f"from_nchwc {self.blocked[v]} -> {out} (NCHW)")

    def _weight_node(self, op: str, w: str, attrs: dict, suffix: str) -> str:
        out = self._fresh(f"{w}{suffix}")
        self._add(op, (w,), out, attrs)
        return out

    def _emit(self, op: str, inputs, node: Node, attrs: dict | None = None, *, blocked: bool,
              fn=None, opdef=None) -> None:
        """``node`` computed by ``op`` on ``inputs``; its result blocked or not."""
        v = node.outputs[0]
        if blocked:
            out = v if v not in self.graph.outputs else self._fresh(f"{v}_nchwc")
            self.taken.add(out)
            self.blocked[v] = out
        else:
            out = v
        self._add(op, inputs, out, attrs or {}, node.span, fn, opdef)
        if not blocked and self._shape(out) == self._orig_shape(v):
            # the graph's own (maybe symbolic) shape, which its consumers' shapes match:
            # fusion compares them
            self.values[out] = self.orig[v]

    def _add(self, op: str, inputs, out: str, attrs: dict, span=None, fn=None,
             opdef=None) -> None:
        opdef = opdef or self.std(op)
        shapes = [self._shape(v) for v in inputs]
        fn = fn or opdef.instantiate(attrs, [len(s) for s in shapes])
        binding: dict[te.Var, int] = {}
        for ph, shape in zip(fn.inputs, shapes):
            for dim, n in zip(ph.shape, shape):
                if isinstance(dim, te.Var):
                    binding.setdefault(dim, n)
        env = {v.name: n for v, n in binding.items()}
        result = fn.outputs[0]
        shape = tuple(te.Const(eval_size(d, env), INDEX) for d in result.shape)
        self.values[out] = Value(out, result.dtype, shape, "node")
        self.nodes.append(Node(op, tuple(inputs), (out,), tuple(sorted(attrs.items())), fn,
                               tuple((var, te.Const(binding[var], INDEX))
                                     for var in fn.shape_vars), opdef, span))

    def _live(self) -> set[str]:
        used = set(self.graph.inputs) | set(self.graph.params) | set(self.graph.outputs)
        for n in self.nodes:
            used |= set(n.inputs) | set(n.outputs)
        return used


def _itemsize(dtype: str) -> int:
    return to_numpy(dtype).itemsize
