"""The content-addressed build cache: reuse, rebuild of bad entries, concurrency, safety."""
import multiprocessing
import os
import shutil
import stat

import numpy as np
import pytest
from cffi import FFI

from tdsl.errors import BuildError
from tdsl.target import as_target
from tdsl.emit_c import BuildCache, build_kernel, default_cache_dir, emit_c
from tdsl.lowering import te
from tdsl.lowering.loop_ir import Buffer, BufferLoad, For, ForKind, LoweredFunc, Store

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

PROTOTYPE = "int shift(const float* restrict x, float* restrict y, int64_t n)"


def shift_source(amount: float) -> str:
    return f"""#include <stdint.h>
{PROTOTYPE} {{
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] + {float(amount)}f;
    return 0;
}}
"""


def run_shift(lib_path, x):
    ffi = FFI()
    ffi.cdef(PROTOTYPE + ";")
    # never unloaded: dlclose under OpenMP's idle threads crashes (see emit_c.kernel)
    lib = ffi.dlopen(str(lib_path), ffi.RTLD_NOW | ffi.RTLD_NODELETE)
    y = np.empty_like(x)
    lib.shift(ffi.cast("float *", x.ctypes.data), ffi.cast("float *", y.ctypes.data), x.size)
    return y


def test_second_build_of_the_same_source_does_not_compile(tmp_path):
    cache = BuildCache(tmp_path / "c")
    first = cache.build(shift_source(1))
    second = cache.build(shift_source(1))
    assert first.compiled and not second.compiled
    assert cache.compile_count == 1
    assert first.lib_path == second.lib_path and first.key in first.lib_path.name
    assert BuildCache(tmp_path / "c").build(shift_source(1)).compiled is False  # across caches
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run_shift(second.lib_path, x), x + 1)


def test_changed_source_or_flags_build_a_new_library(tmp_path):
    cache = BuildCache(tmp_path / "c")
    one, two = cache.build(shift_source(1)), cache.build(shift_source(2))
    other_flags = cache.build(shift_source(1), flags=(*as_target("c").flags, "-O2"))
    assert len({one.lib_path, two.lib_path, other_flags.lib_path}) == 3
    assert cache.compile_count == 3
    x = np.zeros(3, np.float32)
    # dlopen caches by path: distinct names mean each library runs its own code
    np.testing.assert_array_equal(run_shift(one.lib_path, x), x + 1)
    np.testing.assert_array_equal(run_shift(two.lib_path, x), x + 2)


@pytest.mark.parametrize("damage", ["garbage", "truncate", "delete", "bad_digest", "no_meta"])
def test_a_damaged_entry_is_rebuilt_not_loaded(tmp_path, damage):
    cache = BuildCache(tmp_path / "c")
    built = cache.build(shift_source(3))
    meta = built.lib_path.with_suffix(".json")
    if damage == "garbage":
        built.lib_path.write_bytes(b"\x7fELF not really a library")
    elif damage == "truncate":
        data = built.lib_path.read_bytes()
        built.lib_path.write_bytes(data[:len(data) // 2])
    elif damage == "delete":
        built.lib_path.unlink()
    elif damage == "bad_digest":
        meta.write_text('{"so_sha256": "0000"}')
    else:
        meta.unlink()
    again = cache.build(shift_source(3))
    assert again.compiled and cache.compile_count == 2
    x = np.ones(5, np.float32)
    np.testing.assert_array_equal(run_shift(again.lib_path, x), x + 3)


def test_a_corrupted_kernel_library_is_rebuilt_before_loading(tmp_path):
    n, i = te.Var("n"), te.Var("i")
    x, y = Buffer("x", "f32", (n,)), Buffer("y", "f32", (n,))
    body = For(i, te.Const(0, "i64"), n, ForKind.SERIAL,
               Store(y, (i,), BufferLoad(x, (i,), "f32") * te.Const(3.0, "f32")))
    func = LoweredFunc("triple", (x, y), body, (n,), 1)
    cache = BuildCache(tmp_path / "c")
    # (not loaded first: overwriting a library a process has mapped would crash that process)
    entry = cache.build(emit_c(func).source)
    entry.lib_path.write_bytes(b"\0" * 100)
    second = build_kernel(func, cache=cache)
    assert second.compiled and second.lib_path == entry.lib_path
    np.testing.assert_array_equal(second(np.ones(3, np.float32)), [3, 3, 3])


def _build_in_child(root, source, barrier, results):
    barrier.wait()          # both processes start compiling at the same moment
    built = BuildCache(root).build(source)
    x = np.arange(6, dtype=np.float32)
    results.put(bool(np.array_equal(run_shift(built.lib_path, x), x + 7)))


def test_two_processes_building_the_same_kernel_both_succeed(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    root, source = str(tmp_path / "c"), shift_source(7)
    procs = [ctx.Process(target=_build_in_child, args=(root, source, barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert [results.get(timeout=5) for _ in procs] == [True, True]
    leftovers = [f for f in os.listdir(root) if f.endswith(".tmp")]
    assert leftovers == []
    assert BuildCache(root).build(source).compiled is False


def test_cache_directory_is_private(tmp_path):
    root = tmp_path / "deep" / "cache"
    BuildCache(root).build(shift_source(1))
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


def test_a_cache_directory_others_can_write_is_refused(tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    with pytest.raises(BuildError, match="writable by other users"):
        BuildCache(root).build(shift_source(1))


needs_root = pytest.mark.skipif(os.getuid() != 0, reason="giving files away needs root")


@needs_root
def test_a_cache_directory_owned_by_another_user_is_refused(tmp_path):
    """As ssh's StrictModes: mode 0755 is not enough, the owner must be this user, and a
    symlink to such a directory is judged by what it points to."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    link = tmp_path / "link"
    link.symlink_to(theirs)
    for root in (theirs, link):
        with pytest.raises(BuildError, match="owned by another user"):
            BuildCache(root).build(shift_source(1))


@needs_root
def test_an_entry_owned_by_another_user_is_rebuilt_not_loaded(tmp_path):
    cache = BuildCache(tmp_path / "c")
    first = cache.build(shift_source(1))
    os.chown(first.lib_path, 65534, 65534)
    again = cache.build(shift_source(1))
    assert again.compiled and os.stat(again.lib_path).st_uid == os.getuid()


def test_an_entry_that_is_a_symlink_is_rebuilt_not_loaded(tmp_path):
    cache = BuildCache(tmp_path / "c")
    first = cache.build(shift_source(1))
    planted = tmp_path / "planted.so"
    os.replace(first.lib_path, planted)
    os.symlink(planted, first.lib_path)
    assert cache.build(shift_source(1)).compiled
    assert not os.path.islink(first.lib_path)


def test_the_rerun_hint_is_a_quoted_shell_line(tmp_path):
    root = tmp_path / "a $(touch pwned); `id`"
    with pytest.raises(BuildError) as info:
        BuildCache(root).build("int broken(void) { return undeclared_thing; }\n")
    line = str(info.value).split("rerun: ")[1]
    assert "'" in line and f"'{root}/" in line


def test_cache_location_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("TDSL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "tdsl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "tdsl"
    monkeypatch.setenv("TDSL_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    assert BuildCache().root == tmp_path / "mine"


def test_compiler_errors_carry_the_message_and_the_kept_source(tmp_path):
    cache = BuildCache(tmp_path / "c")
    with pytest.raises(BuildError) as info:
        cache.build("int broken(void) { return undeclared_thing; }\n")
    message = str(info.value)
    assert "undeclared_thing" in message and "error" in message
    kept = [f for f in os.listdir(tmp_path / "c") if f.endswith(".c")]
    assert len(kept) == 1 and kept[0] in message
    assert not [f for f in os.listdir(tmp_path / "c") if f.endswith((".so", ".tmp"))]


def test_a_missing_compiler_is_a_build_error(tmp_path):
    with pytest.raises(BuildError, match="cannot run the C compiler"):
        BuildCache(tmp_path / "c").build(shift_source(1), compiler="no-such-compiler-tdsl")
