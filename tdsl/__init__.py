"""tdsl: a tensor compiler in pure Python, from a .tdsl DSL to C, CUDA and OpenCL.

    import tdsl
    mod = tdsl.loads("op axpy(X: f32[N], Y: f32[N]; a: float = 2.0) -> Z: f32[N] "
                     "{ Z[i] = a * X[i] + Y[i] }")
    mod["axpy"].reference(x, y, a=3.0)

``tdsl.stdlib`` is the standard library (a `Module`); ``tdsl.TdslError`` is the base of
every error a user can cause; ``tdsl.Target("c -march=x86-64-v3")`` is what code is built for.
"""
__version__ = "0.1.0"

from .errors import (CallError, CheckError, ParseError, ScheduleError, TdslError,  # noqa: E402
                     TdslWarning)
from .target import Target, TargetError, as_target  # noqa: E402
from .api import Graph, GraphModule, Module, Op, load, loads  # noqa: E402

__all__ = ["Target", "TargetError", "as_target", "TdslError", "ParseError", "CheckError",
           "ScheduleError", "CallError", "TdslWarning", "Module", "Graph", "GraphModule",
           "Op", "load", "loads", "stdlib", "__version__"]


def __getattr__(name):
    # The standard library is checked on first use, not at import time.
    if name == "stdlib":
        from .api import stdlib
        return stdlib()
    raise AttributeError(f"module 'tdsl' has no attribute {name!r}")
