"""The measured fp32 FMA peak of a target on this machine: a short loop of independent vector
FMA chains on every core, compiled with the target's own flags; likewise the peak of the
integer dot products that int8 kernels sum with (`KINDS`).

The formula (cores x 2 FMA units x lanes x 2 x GHz, `Target.peak_gflops`) needs a clock the
OS may not report truthfully (a VM says 2 GHz of a core that turbos to 3.8); this measures
what the cores deliver. Enough chains to cover the FMA latency (4 cycles x 2 units) and no
more than the registers hold.

A steady figure, not one sample: one short run once printed 116 GFLOP/s on a host whose
steady peak is 205 (threads still starting, clocks still rising, a neighbour's burst), and
a kernel then ran at "156% of peak". So `measure_peak` warms up (threads started, clocks
up), then times many short runs and keeps the best, until the best has not moved by more
than 1% for several runs or the time is up; it reports the spread of the runs beside it.
A run is short (about 20 ms) so that a quiet moment on a shared machine holds one whole.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from ..errors import BuildError
from ..lowering.dtypes import to_c
from ..target import Target, as_target
from .build import BuildCache
from .helpers import Helpers
from .kernel import load_library

# The timed loop: every thread runs `n` iterations of independent chains (`setup` declares
# them, `body` advances each once) and counts its own rate by its own CPU clock.
_SOURCE = """\
#include <stdint.h>
#include <string.h>
#include <omp.h>
#include <time.h>
{helpers}
static volatile double tdsl_peak_sink;
static double tdsl_cpu_seconds(void) {{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}}
int tdsl_peak_threads(void) {{ return omp_get_max_threads(); }}
double tdsl_peak_rate(long n, float seed) {{
    double rate = 0.0, total = 0.0;
    #pragma omp parallel reduction(+:rate, total)
    {{
{setup}
        double t0 = tdsl_cpu_seconds();
        for (long i = 0; i < n; i++) {{
{body}
        }}
        double t1 = tdsl_cpu_seconds();
        {acc} s = {sum};
        for (int l = 0; l < {lanes}; l++) total += (double)s[l];
        if (t1 > t0) rate += {ops}.0 * (double)n / (t1 - t0);
    }}
    tdsl_peak_sink = total;
    return rate;
}}
"""
_PROTOTYPE = "int tdsl_peak_threads(void); double tdsl_peak_rate(long n, float seed)"

# What `measure_peak` can time: the fp32 FMA, and the integer dot products that the int8
# convolutions and dense layers sum with (`emit_c.helpers`' dot4_u8i8: four u8 x i8
# products per i32 lane, vpdpbusd with VNNI; dot2_i16: two i16 x i16, pmaddwd), each
# product counted as 2 operations as an FMA is.
KINDS = {"fma": "GFLOP/s", "dot4_u8i8": "GOP/s", "dot2_i16": "GOP/s"}
# per dot product: (the products per i32 lane, the activation's and weight's scalar types)
_DOTS = {"dot4_u8i8": (4, "u8", "i8"), "dot2_i16": (2, "i16", "i16")}


def _source(target: Target, kind: str) -> tuple[str, int]:
    """The timed loop's C source for ``kind`` and its operations per thread and iteration."""
    lanes = target.lanes
    if kind == "fma":
        chains = max(2, min(10, target.registers - 4))
        names = [f"c{k}" for k in range(chains)]
        vec = f"tdsl_f32x{lanes}"
        setup = (f"        {vec} a = {{0}}, b = {{0}};\n"
                 "        a += seed; b += 1.0f - seed * 1e-9f;\n"
                 # chains that start equal stay equal: gcc would compute one and copy it (a
                 # 10x "peak" on a Zen 4), so each starts from its own value
                 f"        {vec} " + ", ".join(f"{n} = a + {k}.0f" for k, n in enumerate(names))
                 + ";")
        body = "            " + " ".join(f"{n} = {n} * b + a;" for n in names)
        helpers = f"typedef float {vec} __attribute__((vector_size({4 * lanes})));"
        ops = 2 * lanes * chains
        return (_SOURCE.format(helpers=helpers, setup=setup, body=body, acc=vec, lanes=lanes,
                               sum=" + ".join(names), ops=ops), ops)
    # as a register tile: rows of activations by columns of weight vectors, each chain its
    # own pair, so that none shares a product with another (a plain-C dot product's would
    # be computed once); the activations loaded anew each iteration, as a kernel's are, so
    # that no product can be hoisted out of the loop
    per_lane, a_type, b_type = _DOTS[kind]
    rows, cols = 2, max(1, min(6, (target.registers - 4) // 3))
    h = Helpers()
    dot = getattr(h, kind)(f"i32x{lanes}")
    acc, va, vb = (h.vector(t, n) for t, n in
                   (("i32", lanes), (a_type, per_lane), (b_type, per_lane * lanes)))
    pairs = [(r, c) for r in range(rows) for c in range(cols)]
    setup = "\n".join(
        [f"        {to_c(a_type)} acts[16 * {per_lane}];",
         f"        for (int k = 0; k < 16 * {per_lane}; k++) "
         f"acts[k] = ({to_c(a_type)})((int)(k * seed) & 0x7f);",
         # 0, which the compiler cannot know: the sums stay in range
         f"        {vb} b0 = {{0}};", f"        b0 += ({to_c(b_type)})(seed - 0.5f);",
         *(f"        {vb} b{c} = b0 * {c + 1};" for c in range(1, cols)),
         f"        {acc} " + ", ".join(f"c{r}_{c} = {{0}}" for r, c in pairs) + ";",
         *(f"        c{r}_{c} += {k};" for k, (r, c) in enumerate(pairs))])
    body = "\n".join(
        [*(f"            {va} a{r} = tdsl_load_{a_type}x{per_lane}"
           f"(acts + ((i + {r}) & 15) * {per_lane});" for r in range(rows)),
         "            " + " ".join(f"c{r}_{c} = {dot}(c{r}_{c}, a{r}, b{c});"
                                  for r, c in pairs)])
    ops = 2 * per_lane * lanes * len(pairs)
    return (_SOURCE.format(helpers="\n".join(h.render()), setup=setup, body=body, acc=acc,
                           lanes=lanes, sum=" + ".join(f"c{r}_{c}" for r, c in pairs),
                           ops=ops), ops)


@dataclass(frozen=True)
class Peak:
    """A measured peak: ``gflops`` the best run's rate (G operations/s: flops for the fp32
    FMA), ``runs`` every timed run's rate (in order), ``warmup_s`` the warm-up's length,
    ``unit`` the rate's."""
    gflops: float
    runs: tuple[float, ...]
    warmup_s: float
    unit: str = "GFLOP/s"

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def spread(self) -> float:
        """How far the median run is below the best, as a fraction of the best."""
        return (self.gflops - self.median) / self.gflops if self.gflops else 0.0

    def describe(self) -> str:
        """``205 GFLOP/s (best of 40 runs after a 0.20 s warm-up; runs 180-205, median
        201: spread 2%)``."""
        return (f"{self.gflops:.0f} {self.unit} (best of {len(self.runs)} runs after a "
                f"{self.warmup_s:.2f} s warm-up; runs {min(self.runs):.0f}-{max(self.runs):.0f}, "
                f"median {self.median:.0f}: spread {100 * self.spread:.0f}%)")


def measure_peak_gflops(target: Target | str | None = None, seconds: float = 1.5) -> float:
    """GFLOP/s of fp32 FMAs on all cores for ``target`` (which must run here): the best of
    `measure_peak`'s runs."""
    return measure_peak(target, seconds).gflops


def measure_peak(target: Target | str | None = None, seconds: float = 1.5,
                 kind: str = "fma") -> Peak:
    """The peak of ``kind`` (`KINDS`: the fp32 FMA, or an integer dot product) on all cores
    for ``target`` (which must run here), steady: a warm-up of about ``seconds / 8``, then
    short runs until the best of them has held within 1% for 12 runs (at least 25 runs) or
    ``seconds`` have passed."""
    target = as_target(target)
    why = target.unrunnable_reason()
    if why:
        raise BuildError(f"cannot measure the peak here: {why}")
    if kind not in KINDS:
        raise BuildError(f"no peak of {kind!r}: one of {', '.join(KINDS)}")
    source, ops = _source(target, kind)      # ops per thread and iteration
    built = BuildCache().build(source, target.flags, target.compiler)
    _, lib = load_library(str(built.lib_path), _PROTOTYPE)
    threads = lib.tdsl_peak_threads()
    start = time.perf_counter()

    def rate(n: int) -> float:
        """GFLOP/s of one run of ``n`` iterations on every thread (each by its own CPU
        clock: a thread that waits for its core does not count the wait)."""
        return lib.tdsl_peak_rate(n, 0.5) / 1e9

    # calibrate: iterations for a run of about `run_s` of each thread's CPU time
    run_s = min(0.03, seconds / 20)
    n = 1 << 16
    for _ in range(2):
        per_thread_s = ops * n / (max(rate(n), 1e-3) * 1e9 / threads)
        n = max(1 << 12, int(n * run_s / per_thread_s))
    # warm up: threads started and spinning, clocks up to their sustained all-core speed
    warm_end = start + seconds / 8
    while time.perf_counter() < warm_end:
        rate(n)
    warmup = time.perf_counter() - start
    runs: list[float] = []
    best, held = 0.0, 0
    deadline = start + seconds
    while True:
        runs.append(rate(n))
        held = 0 if runs[-1] > best * 1.01 else held + 1
        best = max(best, runs[-1])
        if (held >= 12 and len(runs) >= 25) or time.perf_counter() > deadline:
            break
    return Peak(best, tuple(runs), warmup, KINDS[kind])


class PeakGauge:
    """Percentages of the measured peak that never read above 100% unexplained: a rate above
    the peak means the peak was measured low (a busy moment), so it is measured again (the
    better of the two kept) and the percentage says so."""

    def __init__(self, target: Target | str | None = None, seconds: float = 1.5):
        self.target, self.seconds = as_target(target), seconds
        self.peak = measure_peak(self.target, seconds)
        self.remeasured: list[Peak] = []

    def percent(self, gflops: float) -> str:
        """``"87% of peak"``; above the peak, ``"97% of peak (re-measured: 205 GFLOP/s, was
        116)"``, and ``"104% of peak, re-measured ..."`` if it still beats it."""
        if gflops <= self.peak.gflops:
            return f"{100 * gflops / self.peak.gflops:.0f}% of peak"
        was = self.peak.gflops
        again = measure_peak(self.target, self.seconds)
        self.remeasured.append(again)
        if again.gflops > self.peak.gflops:
            self.peak = again
        pct = 100 * gflops / self.peak.gflops
        above = ", still above it" if pct > 100 else ""
        return (f"{pct:.0f}% of peak (re-measured{above}: {self.peak.gflops:.0f} GFLOP/s, "
                f"was {was:.0f})")
