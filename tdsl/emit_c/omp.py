"""The OpenMP runtime that host kernels run on, and how many threads they use.

Host kernels are compiled with ``-fopenmp``, so each library needs ``libgomp.so.1``. A
process that also runs PyTorch (or another library with its own OpenMP runtime) must not
end up with two runtimes: each has its own thread pool, whose idle workers spin-wait on
the same cores for a while after every parallel region, and each library's small kernels
then run beside the other's spinning threads (seen: a depthwise convolution of PyTorch's
7x slower when interleaved with tdsl's). This module makes every kernel library bind to
the OpenMP runtime already in the process (`share_loaded_runtime`, called before a kernel
library is loaded), so there is one pool, and sets the kernels' thread count:
``OMP_NUM_THREADS`` first, then ``torch.get_num_threads()`` once the PyTorch bridge is in
use, then the cores this process may use (its CPU affinity and its cgroup's ``cpu.max``
quota).
"""
from __future__ import annotations

import ctypes
import math
import os

# OpenMP runtimes by file name: GNU's (also PyTorch's bundled copies, libgomp-<hash>.so.1),
# LLVM's and Intel's, which export the GOMP_ entry points gcc's code calls
_RUNTIME_NAMES = ("libgomp", "libomp", "libiomp5")


def loaded_runtimes() -> list[str]:
    """The paths of the OpenMP runtimes mapped into this process, in load order."""
    seen: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                base = os.path.basename(path)
                if base.startswith(_RUNTIME_NAMES) and ".so" in base and path not in seen:
                    seen.append(path)
    except OSError:          # not Linux: nothing to share
        pass
    return seen


def available_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def _cgroup_quota() -> float | None:
    """CPUs allowed by the cgroup (v2 ``cpu.max``, v1 ``cfs_quota_us``); None: no limit."""
    for path in _cgroup_dirs():
        try:
            with open(os.path.join(path, "cpu.max")) as f:
                quota, period = (f.read().split() + ["100000"])[:2]
            if quota != "max":
                return int(quota) / int(period)
        except (OSError, ValueError):
            pass
        try:
            with open(os.path.join(path, "cpu.cfs_quota_us")) as f:
                quota = int(f.read())
            with open(os.path.join(path, "cpu.cfs_period_us")) as f:
                period = int(f.read())
            if quota > 0 and period > 0:
                return quota / period
        except (OSError, ValueError):
            pass
    return None


def _cgroup_dirs() -> list[str]:
    dirs = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, rel = line.rstrip("\n").split(":", 2)
                if controllers in ("", "cpu", "cpu,cpuacct", "cpuacct,cpu"):
                    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/cpu",
                                 "/sys/fs/cgroup/cpu,cpuacct"):
                        dirs.append(root + rel)
    except (OSError, ValueError):
        pass
    dirs.append("/sys/fs/cgroup")
    return dirs


# a callable giving the thread count a library in this process wants (the PyTorch bridge
# sets it to torch.get_num_threads); None: none does
_threads_from = None


def thread_count() -> int:
    """The threads a host kernel's parallel loops use: ``OMP_NUM_THREADS`` (its first
    number), else what the PyTorch bridge says (``torch.get_num_threads()``), else the
    cores available to the process."""
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    if _threads_from is not None:
        try:
            return max(1, int(_threads_from()))
        except Exception:       # noqa: BLE001 - a broken provider must not break a call
            pass
    return available_cores()


# ---------------------------------------------------------------- one runtime, one pool

_SHARED: set[str] = set()         # runtimes made global already
_CONFIGURED: list = []            # (thread count, runtime path) last applied


def share_loaded_runtime() -> str | None:
    """Before a kernel library is loaded: make the OpenMP runtime already in the process
    (PyTorch's, say) the one its ``GOMP_*`` calls bind to, and return its path.

    gcc's code needs ``libgomp.so.1``. A runtime loaded under that name (PyTorch's bundled
    ``torch/lib/libgomp.so.1`` included) is reused by the loader as it is. One loaded under
    another name (wheels that bundle ``libgomp-<hash>.so.1``, LLVM's ``libomp``, Intel's
    ``libiomp5``, which export the same ``GOMP_`` entry points) would not be: the loader
    would map the system's copy beside it, and two thread pools would spin on the same
    cores. Promoting the loaded one to the global scope (``RTLD_NOLOAD | RTLD_GLOBAL``)
    makes the symbols of every library loaded afterwards resolve to it first."""
    runtimes = loaded_runtimes()
    if not runtimes:
        return None
    chosen = _preferred(runtimes)
    if chosen not in _SHARED and os.path.basename(chosen) != "libgomp.so.1":
        try:
            ctypes.CDLL(chosen, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            return None
        _SHARED.add(chosen)
    return chosen


def _preferred(runtimes: list[str]) -> str:
    """PyTorch's runtime when torch is in use (its pool is the one that must not be
    doubled), else the first loaded."""
    torch_lib = os.sep + "torch" + os.sep + "lib" + os.sep
    return next((r for r in runtimes if torch_lib in r), runtimes[0])


def configure_threads() -> None:
    """Give the runtime the thread count `thread_count` says (``omp_set_num_threads``, on
    the calling thread, which is the one that calls kernels in most programs; other
    threads keep the runtime's default, ``OMP_NUM_THREADS`` or the affinity)."""
    runtimes = loaded_runtimes()
    if not runtimes:
        return
    n, path = thread_count(), _preferred(runtimes)
    if _CONFIGURED and _CONFIGURED[0] == (n, path):
        return
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
        lib.omp_set_num_threads(ctypes.c_int(n))
    except (OSError, AttributeError):
        return
    _CONFIGURED[:] = [(n, path)]


def use_torch(torch) -> None:
    """Called by ``tdsl.torch``: kernels follow ``torch.get_num_threads()`` (unless
    ``OMP_NUM_THREADS`` is set) and share PyTorch's OpenMP runtime."""
    global _threads_from
    _threads_from = torch.get_num_threads
    share_loaded_runtime()
    _CONFIGURED.clear()
    configure_threads()
