"""Run a kernel built under ``-fsanitize=address,undefined``, for the property tests.

Undefined behaviour in emitted C (an out-of-bounds access, a signed overflow, a misaligned
vector load) need not change the answer at one set of flags and can at another, so a test
that compares values at the release flags alone misses it. Here the same function is built
with the sanitizers and called in a child Python that has the sanitizer runtimes preloaded
(ASan must come first in the process; the test process itself is left alone). Any report,
or a crash, is a `SanitizerReport` carrying the runtime's message.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile

from ..lowering.loop_ir import LoweredFunc
from ..target import as_target, kernel_flags
from .build import BuildCache
from .c import HostC

SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                  "-fno-sanitize-recover=undefined")
_OPTIONS = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=86"}

_CHILD = """
import pickle, sys
from tdsl.emit_c.kernel import Kernel
func, module, built, target, arrays = pickle.load(open(sys.argv[1], "rb"))
out = Kernel(func, module, built, {}, target)(*arrays)
pickle.dump(out, open(sys.argv[2], "wb"))
"""


class SanitizerReport(AssertionError):
    """The sanitizers found undefined behaviour (or the kernel crashed)."""


def run_sanitized(func: LoweredFunc, arrays, target=None, timeout: float = 120.0):
    """The outputs of ``func`` on ``arrays``, computed by a sanitized build in a child."""
    target = as_target(target)
    module = HostC(func, None, target).module()
    built = BuildCache().build(module.source, (*kernel_flags(target, module.source),
                                               *SANITIZE_FLAGS), target.compiler)
    runtimes = [_runtime(target.compiler, lib) for lib in ("libasan.so", "libubsan.so")]
    env = {**os.environ, **_OPTIONS, "LD_PRELOAD": " ".join(runtimes)}
    with tempfile.TemporaryDirectory(prefix="tdsl-sanitize-") as tmp:
        args, outs = os.path.join(tmp, "args.pkl"), os.path.join(tmp, "outs.pkl")
        with open(args, "wb") as f:
            pickle.dump((func, module, built, target, list(arrays)), f)
        proc = subprocess.run([sys.executable, "-c", _CHILD, args, outs], env=env,
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or "runtime error" in proc.stderr:
            raise SanitizerReport(f"{func.name} under {' '.join(SANITIZE_FLAGS)}:\n"
                                  f"{proc.stderr[-4000:]}")
        with open(outs, "rb") as f:
            return pickle.load(f)


def _runtime(compiler: str, name: str) -> str:
    path = subprocess.run([compiler, f"-print-file-name={name}"], capture_output=True,
                          text=True).stdout.strip()
    return path or name
