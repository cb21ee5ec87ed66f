"""Every standard-library op's CUDA source (kernels and launcher) compiles with nvcc clean,
for sm_90 SASS and compute_90 PTX (the target's flags), warnings as errors. No GPU is needed:
the library loads, and calling it without a device is a clear `CallError`. Where a GPU is
(scripts/gpu_check.sh), every op also runs against its reference."""
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tdsl
import tdsl.testing as tt
from tdsl.emit_cuda import unavailable_reason

from test_stdlib_c import ATTRS

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc (the CUDA toolkit) is not installed")

STRICT = ("-Werror", "all-warnings")
# the GPU's own architecture where one runs the kernels (scripts/gpu_check.sh sets it)
RUN_TARGET = os.environ.get("TDSL_TEST_CUDA_TARGET", "cuda")


def _ranks(op):
    """Rank-generic ops (``*S``) are built at rank 3."""
    generic = any(type(d).__name__ == "PackDim" for p in op.ast.params
                  for d in p.type.dims or ())
    return 3 if generic else None


@pytest.mark.parametrize("name", sorted(tdsl.stdlib))
def test_std_op_cuda_source_compiles_clean(name):
    op = tdsl.stdlib[name]
    kernel = op.build(target="cuda -arch=sm_90", flags=STRICT, ranks=_ranks(op),
                      **ATTRS.get(name, {}))
    assert "__global__" in kernel.device_source
    assert kernel.lib_path.exists()


def test_calling_without_a_gpu_is_a_clear_error_or_runs():
    op = tdsl.stdlib["matmul"]
    kernel = op.build(target=RUN_TARGET)
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 5), np.float32)
    try:
        c = kernel(a, b)
    except tdsl.CallError as e:
        assert "CUDA" in str(e)
    else:                          # a machine with a GPU: then it must be right
        np.testing.assert_allclose(c, a @ b)


@pytest.mark.skipif(unavailable_reason() is not None,
                    reason=f"CUDA: {unavailable_reason()}")
@pytest.mark.parametrize("name", sorted(tdsl.stdlib))
def test_std_op_run_on_cuda_matches_reference(name):
    """On a machine with an NVIDIA GPU (scripts/gpu_check.sh): every op at awkward sizes,
    with its GPU schedule and with random tiles and bindings."""
    op = tdsl.stdlib[name]
    attrs = ATTRS.get(name, {})

    @settings(max_examples=4, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(tt.cases(op, attrs, max_size=9, target=RUN_TARGET))
    def check(case):
        tt.check_case(op, case, attrs, target=RUN_TARGET)

    check()
