"""Compile C source into a shared library, through a content-addressed cache.

An entry is named by ``sha256(source, flags, compiler version, machine)``: the same kernel is
compiled once per machine, and a changed kernel never reuses an old library. The name also
matters for loading: ``dlopen`` caches by path, so a library rebuilt at an old path would
keep running the old code in a process that loaded it before.

The cache directory is ``$TDSL_CACHE_DIR``, else ``$XDG_CACHE_HOME/tdsl``, else
``~/.cache/tdsl``, created with mode 0700: a directory others can write to could be handed a
library this process then loads, so one writable by group or others is refused.

Each entry is three files: ``tdsl_<key>.c`` (kept, so a failure can be read and rerun),
``tdsl_<key>.so`` and ``tdsl_<key>.json`` (the .so's sha256). An entry whose .so is missing,
truncated or does not match its digest is rebuilt, never loaded. Every file is written to a
temporary name in the same directory and moved into place with ``os.replace``, which is
atomic, so processes building the same kernel at once all succeed and nobody reads half a file.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shlex
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildError
from ..target import as_target

# The flags come from the target (tdsl/target.py): its ISA, its vector width, and the
# value-preserving options every host build takes.
LIBS = ("-lm",)
COMPILE_TIMEOUT_S = 300


def default_cache_dir() -> Path:
    if os.environ.get("TDSL_CACHE_DIR"):
        return Path(os.environ["TDSL_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tdsl"


@functools.lru_cache(maxsize=None)
def compiler_version(compiler: str) -> str:
    """The compiler's ``--version`` banner (part of every cache key)."""
    try:
        proc = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"cannot run the C compiler {compiler!r}: {exc}",
                         hint="install gcc, or pass another compiler to BuildCache") from None
    return proc.stdout.strip()


@functools.lru_cache(maxsize=None)
def machine_identity() -> str:
    """What ``-march=native`` depends on: the architecture and the CPU's feature flags. A
    library built for one CPU can die of SIGILL on another sharing the cache (NFS homes)."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return f"{platform.machine()} {hashlib.sha256(flags.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class BuildResult:
    lib_path: Path
    source_path: Path
    key: str
    compiled: bool       # False when the library came from the cache


class BuildCache:
    """A directory of compiled kernels. ``compile_count`` counts compiler runs (tests use it)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()
        self.compile_count = 0

    def key(self, source: str, flags, compiler: str = "gcc", libs=LIBS) -> str:
        parts = [source, " ".join(flags), compiler, compiler_version(compiler)]
        if tuple(libs) != LIBS:
            parts.append(" ".join(libs))
        if any("native" in f for f in flags):
            parts.append(machine_identity())
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def build(self, source: str, flags=None, compiler: str = "gcc", libs=LIBS) -> BuildResult:
        """The library for ``source`` built by ``compiler`` with ``flags`` (a target's; the
        host's by default) and linked with ``libs``, compiled now only if no valid entry
        exists."""
        flags = tuple(as_target("c").flags if flags is None else flags)
        self._ensure_root()
        key = self.key(source, flags, compiler, libs)
        lib, meta, src = (self.root / f"tdsl_{key}{ext}" for ext in (".so", ".json", ".c"))
        if _entry_is_valid(lib, meta):
            return BuildResult(lib, src, key, compiled=False)
        try:
            _write_atomic(src, source.encode())
            digest = self._compile(src, lib, flags, compiler, tuple(libs))
            _write_atomic(meta, json.dumps({"so_sha256": digest, "flags": list(flags),
                                            "compiler": compiler_version(compiler)},
                                           indent=1).encode())
        except OSError as exc:
            raise BuildError(f"cannot write to the kernel cache {self.root}: {exc}",
                             hint="set TDSL_CACHE_DIR to a writable directory") from None
        self.compile_count += 1
        return BuildResult(lib, src, key, compiled=True)

    def _compile(self, src: Path, lib: Path, flags: tuple, compiler: str,
                 libs: tuple = LIBS) -> str:
        """Compile to a temporary file, then move it into place; returns its sha256."""
        fd, tmp = tempfile.mkstemp(prefix=lib.name + ".", suffix=".tmp", dir=self.root)
        os.close(fd)
        try:
            cmd = [compiler, *flags, str(src), "-o", tmp, *libs]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=COMPILE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise BuildError(f"{compiler} ran over {COMPILE_TIMEOUT_S} s on {src}") \
                    from None
            except OSError as exc:
                raise BuildError(f"cannot run the C compiler {compiler!r}: {exc}",
                                 hint=f"install {compiler}") from None
            if proc.returncode != 0:
                # quoted: a path may hold $(...), ; or backquotes, and the line gets pasted
                raise BuildError(f"{compiler} failed on {src}:\n{proc.stderr.strip()}",
                                 hint=f"the source is kept; rerun: {shlex.join(cmd)}")
            digest = _sha256_file(Path(tmp))
            os.replace(tmp, lib)
            return digest
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = self.root.stat()          # what a symlink points to, as it is what is used
            mode = st.st_mode
        except OSError as exc:
            raise BuildError(f"cannot create the kernel cache {self.root}: {exc}",
                             hint="set TDSL_CACHE_DIR to a writable directory") from None
        # as ssh's StrictModes: a directory someone else owns may hold their libraries,
        # whose constructors would run in this process when loaded
        if st.st_uid != os.getuid():
            raise BuildError(f"the kernel cache {self.root} is owned by another user "
                             f"(uid {st.st_uid}), so a library in it cannot be trusted",
                             hint="set TDSL_CACHE_DIR to a directory of your own")
        if mode & 0o022:
            raise BuildError(f"the kernel cache {self.root} is writable by other users "
                             f"(mode {mode & 0o777:o}), so a library in it cannot be trusted",
                             hint=f"chmod 700 {self.root}, or set TDSL_CACHE_DIR elsewhere")


def build_library(source: str, flags=None, cache: BuildCache | None = None,
                  compiler: str = "gcc") -> BuildResult:
    """Compile ``source`` through ``cache`` (default: the user's cache directory)."""
    return (cache or BuildCache()).build(source, flags, compiler)


def _entry_is_valid(lib: Path, meta: Path) -> bool:
    """An entry is used only if it is ours (files, not links, owned by this user) and the
    library's hash is the one recorded when it was built; else it is rebuilt in place."""
    try:
        for path in (lib, meta):
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                return False
        expected = json.loads(meta.read_text())["so_sha256"]
        return _sha256_file(lib) == expected
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
