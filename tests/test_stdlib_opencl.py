"""Every standard-library op, built for OpenCL with its GPU schedule (the automatic one where
the op has no `for gpu`/`for opencl` block), run on the OpenCL driver here (PoCL in CI),
matches its numpy reference on awkward sizes (primes, 1, sizes that no tile divides).

PoCL compiles each kernel program once per process (and caches it on disk), so the examples
are few and the sizes stay symbolic: one driver build per op and rank."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tdsl
import tdsl.testing as tt
from tdsl.emit_opencl import unavailable_reason

from test_stdlib_c import ATTRS

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=f"OpenCL: {unavailable_reason()}")


@pytest.mark.parametrize("name", sorted(tdsl.stdlib))
def test_std_op_built_for_opencl_matches_reference(name):
    op = tdsl.stdlib[name]
    attrs = ATTRS.get(name, {})

    @settings(max_examples=3, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(tt.cases(op, attrs, max_size=9, schedules_too=False))
    def check(case):
        tt.check_case(op, case, attrs, target="opencl")

    check()


def test_opencl_matmul_at_sizes_no_tile_divides():
    op = tdsl.stdlib["matmul"]
    kernel = op.build(target="opencl")
    rng = np.random.default_rng(0)
    for m, k, n in [(1, 1, 1), (67, 13, 131), (128, 64, 96)]:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4, atol=1e-4)
