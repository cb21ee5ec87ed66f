"""Every standard-library op's CUDA source (kernels and launcher) compiles with nvcc clean,
for sm_90 SASS and compute_90 PTX (the target's flags), warnings as errors. No GPU is needed:
the library loads, and calling it without a device is a clear `CallError`."""
import shutil

import numpy as np
import pytest

import tdsl

from test_stdlib_c import ATTRS

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None,
                                reason="nvcc (the CUDA toolkit) is not installed")

STRICT = ("-Werror", "all-warnings")


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
    kernel = op.build(target="cuda")
    a = np.ones((3, 4), np.float32)
    b = np.ones((4, 5), np.float32)
    try:
        c = kernel(a, b)
    except tdsl.CallError as e:
        assert "CUDA" in str(e)
    else:                          # a machine with a GPU: then it must be right
        np.testing.assert_allclose(c, a @ b)
