"""tdsl: a tensor compiler in pure Python, from a .tdsl DSL to C, CUDA and OpenCL."""
__version__ = "0.1.0"

from .errors import TdslError  # noqa: E402,F401
