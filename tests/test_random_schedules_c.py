"""Random legal schedules of the standard ops, built for C, compute what the reference does
(issue 9). The kernels are built twice: with the release flags, and under
-fsanitize=address,undefined so that undefined behaviour in the emitted C fails the test
instead of hiding until some flag exposes it. A few hundred schedules by default; thousands
under the ``slow`` marker."""
import shutil

import pytest
from hypothesis import HealthCheck, given, settings

import tdsl
import tdsl.testing as tt

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

OPS = {"softmax": {}, "layer_norm": {}, "depthwise_conv2d": {}, "matmul": {},
       "max_pool2d": {"kernel": 2}, "conv2d": {"padding": 1}}


def _property(name, examples, sanitize):
    op = tdsl.stdlib[name]
    attrs = OPS[name]

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(tt.cases(op, attrs, max_size=6))
    def prop(case):
        tt.check_case(op, case, attrs, sanitize=sanitize)
    return prop


@pytest.mark.parametrize("name", sorted(OPS))
def test_random_schedules_match_the_reference(name):
    _property(name, 12, sanitize=False)()


@pytest.mark.parametrize("name", sorted(OPS))
def test_random_schedules_are_free_of_undefined_behaviour(name):
    _property(name, 6, sanitize=True)()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(OPS))
def test_many_random_schedules(name):
    _property(name, 400, sanitize=False)()
    _property(name, 100, sanitize=True)()


def test_the_sanitized_run_reports_an_out_of_bounds_read():
    """The check itself works: a hand-made function that reads one past its input."""
    import numpy as np

    from tdsl.emit_c.sanitized import SanitizerReport, run_sanitized
    from tdsl.lowering import te
    from tdsl.lowering.loop_ir import Buffer, BufferLoad, For, ForKind, LoweredFunc, Store
    n, i = te.Var("N"), te.Var("i")
    x, y = Buffer("X", "f32", (n,)), Buffer("Y", "f32", (n,))
    one = te.Const(1, "i64")
    body = For(i, te.Const(0, "i64"), n, ForKind.SERIAL,
               Store(y, (i,), BufferLoad(x, (te.Binary("+", i, one, "i64"),), "f32")))
    func = LoweredFunc("past_the_end", (x, y), body, (n,), 1)
    with pytest.raises(SanitizerReport, match="AddressSanitizer"):
        run_sanitized(func, [np.ones(1000, np.float32)])
