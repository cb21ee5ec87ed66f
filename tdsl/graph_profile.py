"""Where a graph module's time goes: each fused kernel timed alone, bound to the buffers of a
real call, as TVM's debug executor times each operator.

``module.profile(x)`` (`GraphModule.profile`) is a `GraphProfile`: a row per fused kernel
(its time, share of the kernels' sum, flops, GFLOP/s and % of the target's fp32 FMA peak,
bytes moved and GB/s), the whole call timed end to end beside the sum, and a total per
anchor op. ``print(profile)`` is the table; ``tdsl graph FILE --profile`` prints it.

What the figures count:
- flops: the kernel's anchor op, as `tdsl.tuner.task.flop_count` counts its algorithm (a
  convolution 2·N·F·OH·OW·C·KH·KW, a dense layer 2·M·N·K + M·N with its bias). A Winograd
  convolution counts the direct sum it replaces: it does about 2.25x (F(4x4): 4x) fewer multiplies, so
  its GFLOP/s is the rate a direct convolution would need to match it (and may pass the
  peak). The epilogue fused after the anchor (a bias, a relu: a few operations per output)
  is not counted.
- bytes: the kernel's input and output buffers (activations and weights), each once: what
  it must move at the least, whatever its caches keep.
- bound: a kernel whose anchor is complex-out-fusable (a convolution, dense, matmul) is
  compute-bound and its table row shows GFLOP/s and % of peak; the others (elementwise,
  pooling, layout changes) are memory-bound and show GB/s.
- integer kernels (int8 convolutions and dense layers): their operations (2 per product)
  against the peak of the integer dot product they sum with (`tdsl.emit_c.peak.KINDS`:
  VNNI's vpdpbusd, Arm's sdot, the i16 pairs of pmaddwd), measured on this machine, as
  GOP/s and % of that peak. Not on a target with AMX tiles, whose peak is the tile unit's.
- at the peak (`GraphProfile.peak_seconds`): the kernels' sum were each float32
  compute-bound kernel to run at the fp32 FMA peak, a Winograd one its products alone (its
  transforms free), each integer one at its dot product's peak, and the others as
  measured. No schedule of these kernels beats it, so
  it bounds what a speed goal can ask of them on this machine: a model whose time at the
  peak is 5.1 ms cannot run 1.5x faster than a runtime's 7.0.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

from .errors import TdslError
from .graph_weights import sizes_text
from .lowering.dtypes import to_numpy
from .lowering.graph.patterns import Pattern
from .lowering.sizes import nbytes
from .target import as_target, host_ghz


def kernel_times(module, inputs, passes: int = 20):
    """``(compiled graph, seconds per kernel)``: each fused kernel of a graph module timed
    alone on these inputs, in the model's order, the best of ``passes`` passes."""
    bound = module._staged(inputs)      # the kernels bound to these inputs' copies
    compiled, runs = bound.compiled, bound.runs
    best = [float("inf")] * len(runs)
    for _ in range(passes):
        for i, run in enumerate(runs):
            t = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - t)
    return compiled, best


@dataclass(frozen=True)
class KernelProfile:
    """One fused kernel: ``index`` (k0, k1 ... as `tdsl graph` numbers them), ``ops`` joined
    by '+', the ``anchor`` op and its ``attrs``, the first ``output``'s shape, the
    ``schedule`` it took, its best time, its ``share`` of the kernels' sum, and the figures
    the module's docstring defines (``gflops``/``peak_percent`` None without flops)."""
    index: int
    ops: str
    anchor: str
    attrs: tuple[tuple[str, object], ...]
    output: tuple[int, ...]
    schedule: str
    seconds: float
    share: float
    flops: int
    gflops: float | None
    peak_percent: float | None  # of the fp32 peak, an integer kernel's of its dot product's
    bytes: int
    gbps: float
    bound: str                  # "compute" or "memory"
    direct_equivalent: bool     # flops counted as the direct sum (a Winograd convolution)
    peak_seconds: float         # at the peak (module docstring); else ``seconds``
    integer_dot: str | None = None  # the integer dot product (`emit_c.peak.KINDS`) it sums with


@dataclass(frozen=True)
class GraphProfile:
    """A graph module's profile at one binding of its sizes. ``call_seconds`` is the median
    of ``passes`` whole calls (inputs copied in, outputs out), ``call_best`` their best;
    each kernel's ``seconds`` is its best of ``passes`` runs alone."""
    graph: str
    sizes: tuple[tuple[str, int], ...]
    target: str
    peak_gflops: float
    peak_source: str            # how the peak was found: measured, or the formula's terms
    passes: int
    call_seconds: float
    call_best: float
    rows: tuple[KernelProfile, ...]
    integer_peaks: tuple[tuple[str, float], ...] = ()   # (dot product, GOP/s) its rows use

    @property
    def kernel_seconds(self) -> float:
        """The kernels' times summed."""
        return sum(r.seconds for r in self.rows)

    @property
    def overhead_seconds(self) -> float:
        """The best whole call less the kernels' sum: copies in and out, the calls between."""
        return self.call_best - self.kernel_seconds

    @property
    def peak_seconds(self) -> float:
        """The kernels' sum with each float32 compute-bound kernel at the peak (the module
        docstring): a lower bound on `kernel_seconds`."""
        return sum(r.peak_seconds for r in self.rows)

    def by_op(self) -> list[tuple[str, float, float, int]]:
        """``(anchor op, seconds, share, kernels)``, the most time first."""
        acc: dict[str, list] = {}
        for r in self.rows:
            e = acc.setdefault(r.anchor, [0.0, 0.0, 0])
            e[0] += r.seconds
            e[1] += r.share
            e[2] += 1
        return sorted(((op, t, s, n) for op, (t, s, n) in acc.items()), key=lambda e: -e[1])

    def __str__(self) -> str:
        ms, total = 1e3, self.kernel_seconds or 1.0
        lines = [
            f"profile of graph {self.graph} at {sizes_text(dict(self.sizes))}, target "
            f"'{self.target}': {len(self.rows)} kernels",
            f"  call {self.call_seconds * ms:.3f} ms end to end (median of {self.passes}, best "
            f"{self.call_best * ms:.3f}); kernels {self.kernel_seconds * ms:.3f} ms summed "
            f"(each its best alone); overhead {self.overhead_seconds * ms:.3f} ms"
            f"{' (within the noise)' if self.overhead_seconds < 0 else ''}",
            f"  peak {self.peak_gflops:.0f} GFLOP/s fp32 FMA, {self.peak_source}",
            *(f"  peak {gops:.0f} GOP/s of the integer dot product {kind} (2 operations a "
              f"product), measured" for kind, gops in self.integer_peaks),
            "  GFLOP/s, %peak: compute-bound kernels (conv, dense, matmul), the anchor op's "
            "flops;",
            *(["  integer kernels: GOP/s and % of their dot product's peak"]
              if self.integer_peaks else []),
            "  GB/s: the others, their input and output buffers once each",
            f"  {'kernel':<7}{'us':>9}{'share':>7}{'GFLOP/s':>9}{'%peak':>7}{'GB/s':>8}"
            f"  ops -> output attrs [schedule]"]
        for r in self.rows:
            if r.bound == "compute" and r.gflops is not None:
                mark = "*" if r.direct_equivalent else " "
                percent = f"{r.peak_percent:6.0f}%" if r.peak_percent is not None else \
                    f"{'-':>7}"
                rate = f"{r.gflops:9.1f}{percent}{mark}{'-':>7}"
            else:
                rate = f"{'-':>9}{'-':>7}{r.gbps:8.1f}"
            attrs = ",".join(f"{k}={v}" for k, v in r.attrs)
            lines.append(f"  k{r.index:<6}{r.seconds * 1e6:9.1f}{100 * r.share:6.1f}%{rate}  "
                         f"{r.ops} -> {'x'.join(map(str, r.output))}"
                         f"{' ' + attrs if attrs else ''} [{r.schedule}]")
        if any(r.direct_equivalent for r in self.rows):
            lines.append("  * Winograd: its flops counted as the direct sum it replaces (it "
                         "does 2.25x fewer multiplies, F(4x4) 4x), so %peak may pass 100")
        lines.append(f"  at the peak {self.peak_seconds * ms:.3f} ms: the kernels' sum with "
                     f"each f32 conv, dense and matmul at 100%, Winograd's products alone, "
                     f"{'integer ones at their dot product peak, ' if self.integer_peaks else ''}"
                     f"the rest as measured ({100 * self.peak_seconds / total:.0f}% of the "
                     f"sum)")
        lines.append("  per anchor op:")
        for op, t, share, n in self.by_op():
            lines.append(f"    {op:<28}{t * 1e6:9.1f} us {100 * share:5.1f}%  "
                         f"({n} kernel{'s' * (n != 1)})")
        return "\n".join(lines)


def profile(module, inputs, passes: int = 20, peak="measured", ghz: float | None = None,
            integer_peak="measured") -> GraphProfile:
    """The `GraphProfile` of ``module`` (a `GraphModule`) on ``inputs``. ``peak``:
    ``"measured"`` (`tdsl.emit_c.peak.measure_peak`, once per target and process),
    ``"formula"`` (`Target.peak_gflops` at ``ghz``, else the reported clock) or a figure in
    GFLOP/s. ``integer_peak``, for integer kernels: ``"measured"`` (their dot product's, once
    per target and process), a figure in GOP/s, or None (no peak: their time as measured)."""
    if passes < 1:
        raise TdslError(f"a profile needs at least 1 pass, got {passes}")
    target = as_target(module._target)
    peak_gflops, source = target_peak(target, peak, ghz)     # measured before, not between
    compiled = module.compiled(*inputs)
    dots = [integer_dot(compiled, g, f, target) for g, f in
            zip(compiled.groups, compiled.functions)]
    integer_peaks = {} if integer_peak is None else \
        {kind: dot_peak(target, kind, integer_peak) for kind in dict.fromkeys(d for d in dots if d)}
    best = kernel_times(module, inputs, passes)[1]
    calls = []
    for _ in range(passes):
        t = time.perf_counter()
        module(*inputs)
        calls.append(time.perf_counter() - t)
    total = sum(best) or 1.0
    rows = []
    for i, (g, f, t, dot) in enumerate(zip(compiled.groups, compiled.functions, best, dots)):
        flops = anchor_flops(compiled, f)
        moved = sum(_bytes(compiled, v) for v in (*f.inputs, *f.outputs))
        gflops = flops / t / 1e9 if flops and t > 0 else None
        compute = g.pattern == Pattern.COMPLEX
        # the peak that bounds it and the operations it bounds (flops, or a Winograd
        # convolution's products; an integer kernel's at its dot product's peak)
        rate, products = (integer_peaks[dot], flops) if dot in integer_peaks else \
            (peak_gflops, multiply_flops(compiled, f, flops) if compute else 0)
        percent = None if gflops is None or (dot and dot not in integer_peaks) else \
            100 * gflops / rate
        rows.append(KernelProfile(
            i, "+".join(f.ops), f.anchor.op, tuple(f.anchor.attrs),
            tuple(compiled.ir.shape_of(f.outputs[0], compiled.sizes)),
            compiled.schedules[i] if i < len(compiled.schedules) else "?", t, t / total,
            flops, gflops, percent, moved, moved / t / 1e9 if t > 0 else 0.0,
            "compute" if compute else "memory", f.anchor.op.startswith(WINOGRAD),
            min(t, products / (rate * 1e9)) if products else t, dot))
    return GraphProfile(module.graph.name, tuple(sorted(compiled.sizes.items())), str(target),
                        peak_gflops, source, passes, statistics.median(calls), min(calls),
                        tuple(rows), tuple(integer_peaks.items()))


def anchor_flops(compiled, f) -> int:
    """The fused kernel ``f``'s anchor op's arithmetic (`flop_count`), a Winograd
    convolution's as the direct 3x3 sum it replaces; 0 where it cannot be counted."""
    from .tuner.task import flop_count
    node = f.anchor
    if node.op.startswith(WINOGRAD):      # x: [N, CB, H, W, CI]; 3x3 taps
        out = math.prod(compiled.ir.shape_of(node.outputs[0], compiled.sizes))
        x = compiled.ir.shape_of(node.inputs[0], compiled.sizes)
        return int(2 * out * x[1] * x[4] * 9)
    try:
        return flop_count(node.fn, dict(f.anchor_sizes))
    except (KeyError, TdslError):
        return 0


def multiply_flops(compiled, f, flops: int) -> int:
    """The flops of ``f``'s multiply-adds where they are float32 ones that the fp32 FMA peak
    bounds (0 otherwise: an integer convolution's dot products have a peak of their own): the
    anchor's ``flops`` (`anchor_flops`), a Winograd convolution's the products of its tiles,
    2·N·tiles·e²·C·F with e x e transformed tiles of m x m outputs (e = m + 2)."""
    node = f.anchor
    if any(compiled.ir.value(v).dtype != "f32" for v in (*node.inputs, *node.outputs)):
        return 0
    if node.op.startswith(WINOGRAD):
        m = 4 if node.op.startswith(WINOGRAD + "4") else 2
        n, fb, h, w, fi = compiled.ir.shape_of(node.outputs[0], compiled.sizes)
        x = compiled.ir.shape_of(node.inputs[0], compiled.sizes)
        tiles = -(-h // m) * -(-w // m)
        return int(2 * n * tiles * (m + 2) ** 2 * x[1] * x[4] * fb * fi)
    return flops


# the integer dot product (`emit_c.peak.KINDS`) an integer convolution or dense layer sums
# with, by its activations' type (vectorize.py's patterns: u8 x i8 in fours, i16 pairs)
_INTEGER_DOTS = {"u8": "dot4_u8i8", "i16": "dot2_i16"}


def integer_dot(compiled, group, f, target) -> str | None:
    """The integer dot product the compute-bound kernel ``f`` sums with, None for the
    others, for float ones, and on a target whose int8 kernels use AMX tiles (a peak of
    their own)."""
    if group.pattern != Pattern.COMPLEX or target.amx:
        return None
    return _INTEGER_DOTS.get(compiled.ir.value(f.anchor.inputs[0]).dtype)


WINOGRAD = "conv2d_winograd"          # the ops whose flops count as the direct sum
_MEASURED: dict[tuple[str, str], float] = {}   # (target, kind) -> measured peak, per process


def _measured(target, kind: str) -> float:
    """`measure_peak`'s figure for ``kind`` (`emit_c.peak.KINDS`), once per target and
    process."""
    if (str(target), kind) not in _MEASURED:
        from .emit_c.peak import measure_peak
        _MEASURED[str(target), kind] = measure_peak(target, kind=kind).gflops
    return _MEASURED[str(target), kind]


def _given(peak, unit: str) -> float | None:
    """A peak given as a figure, checked; None where ``peak`` is not a number."""
    if not isinstance(peak, (int, float)) or isinstance(peak, bool):
        return None
    if peak <= 0:
        raise TdslError(f"a peak must be positive, got {peak} {unit}")
    return float(peak)


def dot_peak(target, kind: str, peak="measured") -> float:
    """GOP/s of the integer dot product ``kind`` for `profile`'s ``integer_peak``."""
    given = _given(peak, "GOP/s")
    if given is not None:
        return given
    if peak != "measured":
        raise TdslError(f"integer_peak must be 'measured', GOP/s or None, got {peak!r}")
    return _measured(target, kind)


def target_peak(target, peak="measured", ghz: float | None = None) -> tuple[float, str]:
    """``(GFLOP/s, how it was found)`` for `profile`'s ``peak``."""
    target = as_target(target)
    given = _given(peak, "GFLOP/s")
    if given is not None:
        return given, "as given"
    if peak == "measured":
        return _measured(target, "fma"), "measured (vector FMAs on all cores, `tdsl target " \
                                         "--measure`)"
    if peak == "formula":
        clock = ghz or host_ghz()
        return target.peak_gflops(clock), (
            f"by the formula ({os.cpu_count()} cores x 2 FMA x {target.lanes} lanes x 2 x "
            f"{clock:.2f} GHz, {'as given' if ghz else 'the reported clock'})")
    raise TdslError(f"peak must be 'measured', 'formula' or GFLOP/s, got {peak!r}")


def _bytes(compiled, v: str) -> int:
    return nbytes(compiled.ir.shape_of(v, compiled.sizes), to_numpy(compiled.ir.value(v).dtype))
