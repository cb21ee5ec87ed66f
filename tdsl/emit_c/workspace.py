"""One workspace pool for the host kernels of a process, as TVM's runtime has
(``WorkspacePool``).

A kernel's heap workspace (a padded input, a Winograd convolution's transformed tiles) is
allocated and freed on every call (`emit_c.c`: ``tdsl_alloc`` / ``tdsl_free``). glibc's
malloc serves such sizes by ``mmap``, or trims them off its heap once freed, so a call
could fault all its workspace's pages in again: a standalone F(4x4) Winograd call (128 x
28 x 28) took 407 page faults and 1.4 ms, against 0.65 ms in a process whose heap happened
to keep them. The pool keeps freed blocks of 64 KiB and more for the next allocation, a
few per thread (each thread's own, so no lock), whichever kernel asks next: the block one
kernel frees is the next one's, still in cache, as a shared heap would give it. Blocks
kept by per-kernel pools instead cost ResNet-50 a few percent (each kernel's workspace at
addresses of its own, out of cache) and 43 MB; with one pool the model's resident memory
after its calls was 525 MB against 576 with malloc's heap alone (two threads, Zen 4). A
thread's kept blocks stay when it exits: OpenMP's workers live as long as the process.

The pool is a library of its own, built once into the kernel cache and loaded into the
global scope (``RTLD_GLOBAL``) before any kernel library; a kernel names its two entry
points as weak symbols, so loaded by tdsl it binds to the pool, and linked into a C program
without one it falls back to ``aligned_alloc`` and ``free``.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from ..errors import BuildError
from .build import BuildCache

ALLOC, FREE = "tdsl_workspace_alloc", "tdsl_workspace_free"

# A block's first 64 bytes hold its size (the caller's memory stays 64-byte aligned).
SOURCE = f"""\
#include <stdint.h>
#include <stdlib.h>

#define KEEP_MIN ((size_t)1 << 16)   /* smaller blocks stay on malloc's heap anyway */
#define SLOTS 4
static __thread char* kept[SLOTS];

static size_t size_of(const char* block) {{ return *(const size_t*)block; }}

/* bytes: a multiple of 64. The smallest kept block that holds them, else a new one. */
void* {ALLOC}(size_t bytes) {{
    int best = -1;
    for (int i = 0; bytes >= KEEP_MIN && i < SLOTS; i++)
        if (kept[i] != NULL && size_of(kept[i]) >= bytes + 64 &&
            (best < 0 || size_of(kept[i]) < size_of(kept[best]))) best = i;
    char* p;
    if (best >= 0) {{
        p = kept[best];
        kept[best] = NULL;
    }} else {{
        if (bytes > SIZE_MAX - 64 || (p = (char*)aligned_alloc(64, bytes + 64)) == NULL)
            return NULL;
        *(size_t*)p = bytes + 64;
    }}
    return p + 64;
}}

/* Kept in an empty slot, else in place of the smallest kept block if that is smaller. */
void {FREE}(void* memory) {{
    if (memory == NULL) return;
    char* p = (char*)memory - 64;
    int slot = -1;
    for (int i = 0; size_of(p) >= KEEP_MIN && i < SLOTS; i++) {{
        if (kept[i] == NULL) {{ slot = i; break; }}
        if (size_of(kept[i]) < size_of(p) &&
            (slot < 0 || size_of(kept[i]) < size_of(kept[slot]))) slot = i;
    }}
    if (slot < 0) {{ free(p); return; }}
    free(kept[slot]);
    kept[slot] = p;
}}
"""

_POOL: list = []             # [the pool's path, or None where it could not be made]


def load_pool(cache_dir: str | os.PathLike) -> str | None:
    """Before a kernel library is loaded: the pool, built into ``cache_dir`` (the kernel's
    cache) once per process and loaded into the global scope; None where it cannot be (no
    compiler: the kernels then allocate with malloc, as before)."""
    if not _POOL:
        try:
            built = BuildCache(Path(cache_dir)).build(SOURCE, flags=("-O2", "-fPIC", "-shared"))
            ctypes.CDLL(str(built.lib_path),
                        mode=os.RTLD_NOW | os.RTLD_GLOBAL | os.RTLD_NODELETE)
            _POOL.append(str(built.lib_path))
        except (BuildError, OSError):
            _POOL.append(None)
    return _POOL[0]
