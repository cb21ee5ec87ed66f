"""The measured fp32 FMA peak of a target on this machine: a short loop of independent vector
FMA chains on every core, compiled with the target's own flags.

The formula (cores x 2 FMA units x lanes x 2 x GHz, `Target.peak_gflops`) needs a clock the
OS may not report truthfully (a VM says 2 GHz of a core that turbos to 3.8); this measures
what the cores deliver. Enough chains to cover the FMA latency (4 cycles x 2 units) and no
more than the registers hold.
"""
from __future__ import annotations

import time

from ..errors import BuildError
from ..target import Target, as_target
from .build import BuildCache
from .kernel import load_library

_ITERATIONS = 1 << 22

_SOURCE = """\
#include <omp.h>
typedef float vec __attribute__((vector_size({bytes})));
int tdsl_fma_threads(void) {{ return omp_get_max_threads(); }}
float tdsl_fma_loop(long n, float seed) {{
    float total = 0.0f;
    #pragma omp parallel reduction(+:total)
    {{
        vec a = {{0}}, b = {{0}};
        a += seed; b += 1.0f - seed * 1e-9f;
        vec {decl};
        for (long i = 0; i < n; i++) {{
            {body}
        }}
        vec s = {sum};
        for (int l = 0; l < {lanes}; l++) total += s[l];
    }}
    return total;
}}
"""


def measure_peak_gflops(target: Target | str | None = None, seconds: float = 0.3) -> float:
    """GFLOP/s of fp32 FMAs on all cores for ``target`` (which must run here)."""
    target = as_target(target)
    why = target.unrunnable_reason()
    if why:
        raise BuildError(f"cannot measure the peak here: {why}")
    chains = max(2, min(10, target.registers - 4))
    names = [f"c{k}" for k in range(chains)]
    source = _SOURCE.format(
        bytes=4 * target.lanes, lanes=target.lanes,
        # chains that start equal stay equal: gcc would compute one and copy it (a 10x
        # "peak" on a Zen 4), so each starts from its own value
        decl=", ".join(f"{n} = a + {k}.0f" for k, n in enumerate(names)),
        body=" ".join(f"{n} = {n} * b + a;" for n in names),
        sum=" + ".join(names))
    built = BuildCache().build(source, target.flags, target.compiler)
    _, lib = load_library(str(built.lib_path), "int tdsl_fma_threads(void); "
                                               "float tdsl_fma_loop(long n, float seed)")
    n = 1 << 14
    lib.tdsl_fma_loop(n, 0.5)                     # warm up: threads started, clocks up
    while True:
        t0 = time.perf_counter()
        lib.tdsl_fma_loop(n, 0.5)
        elapsed = time.perf_counter() - t0
        if elapsed > seconds / 4 or n >= _ITERATIONS * 64:
            break
        n *= 4
    best = elapsed
    for _ in range(3):
        t0 = time.perf_counter()
        lib.tdsl_fma_loop(n, 0.5)
        best = min(best, time.perf_counter() - t0)
    flops = 2.0 * target.lanes * chains * n * lib.tdsl_fma_threads()
    return flops / best / 1e9
