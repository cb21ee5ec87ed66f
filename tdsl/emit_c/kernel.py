"""`Kernel`: one compiled `LoweredFunc`, called on numpy arrays through cffi (ABI mode).

Calling conventions, chosen so that a bad call is a `CallError` naming the argument and
never a crash or a silently wrong answer:

- Array parameters take ``numpy.ndarray`` only, of exactly the parameter's dtype: no lists,
  no silent casts (a float64 array for an f32 parameter would either be copied behind the
  caller's back or read as garbage). The error says how to convert.
- Rank-0 (scalar) parameters also take Python ``bool``/``int``/``float`` and numpy scalars,
  passed by value; an int must fit the parameter's type.
- A non-contiguous or misaligned input is copied, since the kernel indexes dense row-major
  memory: after the sizes are bound and the outputs' bytes checked, and refused like an
  output (`sizes.contiguous`) where the copy could not fit. An ``out=`` array is never
  copied (the result would be lost): it must be C-contiguous, writeable, of the right
  dtype and shape, and overlap no input and no other output.
- An output, or an input's copy, larger than this process could ever hold is a `CallError`
  naming it, its shape and its bytes, before anything is allocated (`sizes.check_allocation`,
  exact in Python ints: sizes whose product overflows int64 too).
- Sizes (``func.shape_vars``) are bound from the inputs' shapes by the one size binder the
  reference uses too (`lowering.sizes`), with its words. A size fixed at build time is a
  constant in the C code; the arrays must agree with it.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Callable

import numpy as np
from cffi import FFI

from ..errors import BuildError, CallError, not_an_array, wrong_dtype
from ..lowering import te
from ..lowering.dtypes import STORAGE_FLOATS, canonical_bools, is_float, to_c, to_numpy
from ..lowering.loop_ir import Buffer, LoweredFunc
from ..lowering import sizes
from ..lowering.read_regions import check_reads
from ..lowering.te_printer import format_expr
from ..target import Target, as_target, kernel_flags
from . import lean, omp, workspace
from .build import BuildCache, BuildResult
from .c import CModule, HostC
from .expressions import FIRST_READ_FAULT
from .printer import fixed_shapes


@dataclass(frozen=True)
class CCall:
    """A bound kernel call for generated C: the function's address and result type, and
    each argument as ``(kind, value, C type)``: ``pointer`` (an address), ``deref`` (a
    scalar read through its address at each call) or ``value`` (a literal). ``keep``
    holds what the addresses point into."""
    kernel: "Kernel"
    address: int
    result: str
    args: tuple
    keep: object


class Kernel:
    """A callable compiled kernel: ``C = kernel(A, B)`` or ``kernel(A, B, out=C)``.

    Returns the outputs: one array, or a tuple when the function has several. Attributes:
    ``func`` (the LoweredFunc), ``source`` (the C), ``header``, ``lib_path``, ``compiled``
    (whether this build ran the compiler rather than reusing the cache).
    """

    def __init__(self, func: LoweredFunc, module: CModule, built: BuildResult,
                 fixed: dict[te.Var, int] | None = None, target: Target | None = None):
        self.func = func
        self.target = as_target(target)
        self.source = module.source
        self.header = module.header
        self.lib_path = built.lib_path
        self.compiled = built.compiled
        self._fixed = dict(fixed or {})
        self._inputs = func.params[:func.num_inputs]
        self._outputs = func.params[func.num_inputs:]
        self._input_names = [b.name for b in self._inputs]
        self._free_sizes = [v for v in func.shape_vars if v not in self._fixed]
        _check_sizes_bindable(func, self._fixed)
        # a library for another machine (a cross build, an ISA this CPU lacks) is built and
        # kept, never loaded: loading could already run its code and die of SIGILL
        self._unrunnable = self.target.unrunnable_reason()
        # what a call needs of each parameter, worked out once: a call's Python time is
        # what a small kernel pays on top of its own (it was 7 us of a 10 us call)
        self._in_dtypes = [to_numpy(b.dtype) for b in self._inputs]
        self._out_dtypes = [to_numpy(b.dtype) for b in self._outputs]
        if self._unrunnable is None:
            self._ffi, self._lib = load_library(str(built.lib_path), module.prototype)
            self._fn = getattr(self._lib, module.name)
            self._from_buffer = self._ffi.from_buffer
            # None for a scalar input, passed by value
            self._c_types = [self._ffi.typeof(f"{'uint16_t' if b.dtype == 'f16' else to_c(b.dtype)}[]")
                             if b.shape or i >= func.num_inputs else None
                             for i, b in enumerate(func.params)]
        self._read_faults = func.attrs.get("read_faults", ())
        # input shapes -> (sizes to pass, output shapes): binding and checking the sizes is
        # most of a call's Python time, and a kernel is usually called at a few shapes
        self._bound: dict[tuple, tuple] = {}
        # the lean path: the last call written out for its shapes (`_lean_call`), for a
        # kernel whose inputs all go to C as they lie: arrays (a scalar is passed by value),
        # not bool (normalised to 0 and 1 first). A small call took 3.5 us, 1.5 with it.
        self._lean: Callable | None = None
        self._leanable = all(b.shape and b.dtype != "bool" for b in self._inputs)

    def __repr__(self) -> str:
        return f"Kernel({self.func.name}, {self.lib_path})"

    def __call__(self, *arrays, out=None):
        last = self._lean
        if last is not None:
            # arrays of the last call's shapes and dtypes: its checks hold, its sizes too
            outputs = last(arrays, out)
            if outputs is not None:
                return outputs
        if type(arrays[0] if arrays else None) is _TENSOR:   # PyTorch's (once one was seen)
            return _foreign_call(self, arrays, out)
        try:
            args, outputs = self._prepare(arrays, out)
        except _Foreign:            # a tensor or another DLPack/buffer array: viewed, no copy
            return _foreign_call(self, arrays, out)
        self._run(args)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def bind(self, *arrays, out=None):
        """``(run, outputs)``: ``run()`` calls the kernel on these arrays, checked and
        marshalled once, writing ``outputs`` (new arrays unless ``out=``). For timing loops,
        where a call's checks would cost more than a small kernel takes."""
        try:
            args, outputs = self._prepare(arrays, out)
        except _Foreign:
            return _interop().bind(self, arrays, out, self._input_names)
        # a scalar goes to C by value: a 0-d array's value is read at each run, as an
        # array's elements are (a graph module writes its inputs into bound arrays)
        # (a storage float goes as its bits: printer.prototype)
        live = [(i, a, self.func.params[i].dtype in STORAGE_FLOATS)
                for i, (c_type, a) in enumerate(zip(self._c_types, arrays))
                if c_type is None and isinstance(a, np.ndarray)]
        if live:
            return functools.partial(self._run_reading, args, live), outputs
        return self._runner(args), outputs

    def c_call(self, *arrays, out=None) -> "CCall":
        """This call on these arrays as the C a graph runner writes (`emit_c.graph_runner`):
        checked and marshalled once as ``bind`` does. Sizes are literals; a rank-0 array
        is read at each run through its address, as ``bind`` reads it."""
        args, _ = self._prepare(arrays, out)
        ftype = self._ffi.typeof(self._fn)
        values = []
        for i, (a, ctype) in enumerate(zip(args, ftype.args)):
            if i < len(self._c_types) and self._c_types[i] is None:        # a scalar
                values.append(("deref", arrays[i].ctypes.data, ctype.cname)
                              if isinstance(arrays[i], np.ndarray) else ("value", a, ctype.cname))
            elif i < len(self._c_types):
                values.append(("pointer", int(self._ffi.cast("uintptr_t", a)), ctype.cname))
            else:                                                         # a free size
                values.append(("value", int(a), ctype.cname))
        fn = int(self._ffi.cast("uintptr_t", self._fn))
        return CCall(self, fn, ftype.result.cname, tuple(values), args)

    def raise_status(self, status: int) -> None:
        """The error of a nonzero status this kernel returned."""
        if status >= FIRST_READ_FAULT:
            raise CallError(self._read_faults[status - FIRST_READ_FAULT])
        raise MemoryError(f"{self.func.name}: the kernel could not allocate its workspace")

    def _run_reading(self, args: list, live) -> None:
        for i, a, as_bits in live:
            args[i] = _bits(a) if as_bits else a[()]
        self._run(args)

    def _prepare(self, arrays, out):
        """``(args, outputs)``: the checked arguments marshalled for the library."""
        if self._unrunnable is not None:
            raise CallError(f"{self.func.name} cannot run here: {self._unrunnable}",
                            hint=f"the library is built: {self.lib_path}")
        if len(arrays) != len(self._inputs):
            names = ", ".join(b.name for b in self._inputs)
            raise CallError(f"{self.func.name} takes {len(self._inputs)} argument(s) "
                            f"({names}), got {len(arrays)}")
        inputs = list(map(_check_input, self._inputs, arrays, self._in_dtypes))
        key = tuple([a.shape if isinstance(a, np.ndarray) else () for a in inputs])
        bound = self._bound.get(key)
        if bound is None:
            if len(self._bound) >= 64:      # a kernel called at ever new shapes
                self._bound.clear()
            env = self._bind_sizes(inputs)
            sizes.check_shapes(self.func.attrs.get("stage_shapes", ()), env)
            check_reads(self.func.attrs.get("reads", ()), env)
            free = [env[v.name] for v in self._free_sizes]
            shapes = [self._output_shape(b, env) for b in self._outputs]
            large = [sizes.nbytes(s, d) >= sizes.ALIGNED_MIN_BYTES
                     for s, d in zip(shapes, self._out_dtypes)]
            lean = self._lean_call(key, free, shapes, large) if self._leanable else None
            bound = self._bound[key] = (free, shapes, large, lean)
        free_sizes, shapes, large_outputs, lean = bound
        self._lean = lean
        # copies of strided inputs only now that the sizes and outputs are known to be sane
        # (a broadcast view of 2**31 elements is small; its dense copy may not fit)
        for i, a in enumerate(inputs):
            if isinstance(a, np.ndarray) and not (a.flags.c_contiguous and a.flags.aligned):
                inputs[i] = sizes.contiguous(a, f"the dense copy of argument "
                                                f"'{self._inputs[i].name}' of '{self.func.name}'")
        if out is None:
            try:                # large outputs on a cache line, by sizes.empty
                outputs = [self._empty(b, s, d) if large else np.empty(s, d)
                           for b, s, d, large in zip(self._outputs, shapes,
                                                     self._out_dtypes, large_outputs)]
            except MemoryError:         # fits the machine, not its free memory now: named
                outputs = [self._empty(b, s, d)
                           for b, s, d in zip(self._outputs, shapes, self._out_dtypes)]
        else:
            outputs = self._checked_out(out, shapes, inputs)
        args = list(map(self._marshal, self._c_types, inputs + outputs))
        args += free_sizes
        return args, outputs

    def _marshal(self, c_type, value):
        """An array as the pointer cffi passes (no copy); a scalar as itself."""
        return self._from_buffer(c_type, value) if c_type is not None else value

    def _runner(self, args: list):
        """``run()`` calling the library on marshalled ``args``."""
        return functools.partial(self._run, args)

    def _run(self, args: list) -> None:
        """Call the library on marshalled ``args``, raising on failure."""
        status = self._fn(*args)
        if status != 0:
            self.raise_status(status)

    def _bind_sizes(self, inputs) -> dict[str, int]:
        """The sizes of this call, bound as the reference binds them (`lowering.sizes`)."""
        params = [(sizes.argument(b.name, i), b.shape, _describe(b))
                  for i, b in enumerate(self._inputs)]
        # sizes made constants by lowering (shapes=) or by the emitter: the algorithm's
        # checks (stage shapes, read regions) still name them
        fixed = {**self.func.attrs.get("fixed_sizes", {}),
                 **{v.name: n for v, n in self._fixed.items()}}
        return sizes.bind(params, [np.shape(a) for a in inputs], fixed, "fixed at build time",
                          self.func.shape_vars, self.func.name)

    def _output_shape(self, buf: Buffer, env) -> tuple[int, ...]:
        """The shape of an output at these sizes. The lowered shape is an equal rewrite of
        the written one (`sizes.value` says why its windows are not checked here: the
        written stage shapes were, by `sizes.check_shapes`)."""
        what = f"output '{buf.name}' of '{self.func.name}'"
        shape = tuple(sizes.extent(dim, env, f"{what}: dimension {d}")
                      for d, dim in enumerate(buf.shape))
        sizes.check_allocation(shape, to_numpy(buf.dtype), what)
        return shape

    def _lean_call(self, shapes, free_sizes, out_shapes, large) -> Callable:
        """``call(arrays, out)``: this kernel on arrays of these shapes and its dtypes,
        written out for them (`emit_c.lean`), the outputs fresh arrays (large ones on a
        cache line) or ``out=`` where it is one array `_checked_out` would accept (its
        shape and dtype, C-contiguous, aligned, writeable, sharing no memory with an
        input). None, running nothing, sends the call to the checked path, which names
        what is wrong. A call of a 16-value kernel took 2.7 us, 1.5 so (one thread, AVX-512
        host); ``k(x, out=y)`` 3.3, 1.9."""
        count = len(self._inputs)
        env = {"fn": self._fn, "from_buffer": self._from_buffer,
               "raise_status": self.raise_status, "may_share_memory": np.may_share_memory}
        lines = lean.unpack_and_check(count, env, zip(shapes, self._in_dtypes))
        outs = [f"o{k}" for k in range(len(self._outputs))]
        lines.append("    if out is None:")
        for k, (b, shape, dtype, big) in enumerate(zip(self._outputs, out_shapes,
                                                       self._out_dtypes, large)):
            env[f"out_shape{k}"], env[f"out_dtype{k}"] = shape, dtype
            env[f"allocate{k}"] = functools.partial(self._empty, b) if big else np.empty
            lines.append(f"        o{k} = allocate{k}(out_shape{k}, out_dtype{k})")
        if len(outs) == 1:
            lines += ["    elif type(out) is not ndarray or out.shape != out_shape0 or "
                      "out.dtype != out_dtype0:", "        return None", "    else:",
                      "        flags = out.flags",
                      "        if not (flags.c_contiguous and flags.aligned and "
                      "flags.writeable):", "            return None",
                      *(f"        if may_share_memory(out, a{k}):\n            return None"
                        for k in range(count)),
                      "        o0 = out"]
        else:
            lines += ["    else:", "        return None"]
        args = [f"a{k}" for k in range(count)] + outs
        for k, c_type in enumerate(self._c_types[:len(args)]):
            env[f"c_type{k}"] = c_type
        pointers = [f"from_buffer(c_type{k}, {a})" for k, a in enumerate(args)]
        result = outs[0] if len(outs) == 1 else f"({', '.join(outs)},)"
        call = ", ".join(pointers + [str(int(n)) for n in free_sizes])
        lines += [f"    status = fn({call})", "    if status != 0:",
                  "        raise_status(status)", f"    return {result}"]
        return lean.define("call(arrays, out)", lines, env)

    def _empty(self, buffer: Buffer, shape, dtype) -> np.ndarray:
        return sizes.empty(shape, dtype, f"output '{buffer.name}' of '{self.func.name}'")

    def _checked_out(self, out, shapes, inputs) -> list[np.ndarray]:
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(self._outputs):
            raise CallError(f"out= of {self.func.name} needs {len(self._outputs)} array(s) "
                            f"({', '.join(b.name for b in self._outputs)}), got {len(outs)}")
        arrays = [a for a in inputs if isinstance(a, np.ndarray)]
        for k, (buf, arr, shape) in enumerate(zip(self._outputs, outs, shapes)):
            what = f"out= array for {buf.name}"
            if not isinstance(arr, np.ndarray) and _foreign(arr):
                raise _Foreign
            if not isinstance(arr, np.ndarray):
                raise CallError(f"{what} must be a numpy.ndarray, got {type(arr).__name__}")
            if arr.dtype != to_numpy(buf.dtype):
                raise CallError(f"{what} has dtype {arr.dtype}, expected "
                                f"{to_numpy(buf.dtype)} ({buf.dtype})")
            if arr.shape != shape:
                raise CallError(f"{what} has shape {arr.shape}, expected {shape}")
            if not (arr.flags.c_contiguous and arr.flags.aligned and arr.flags.writeable):
                raise CallError(f"{what} must be C-contiguous, aligned and writeable",
                                hint="pass np.empty(shape, dtype) and copy the result over")
            if any(np.may_share_memory(arr, other) for other in arrays + outs[:k]):
                raise CallError(f"{what} overlaps an input or another output",
                                hint="tdsl kernels do not compute in place; pass a fresh array")
        return outs


# Loaded libraries stay loaded for the life of the process. Unloading one (cffi dlcloses a
# library when its object is collected, at the latest when the interpreter shuts down) while
# OpenMP's worker threads still run in libgomp crashed the process (seen: a worker thread
# jumping into the unmapped library; a segfault at exit). RTLD_NODELETE keeps the library,
# and with it libgomp, mapped whatever happens to its object. The key is the
# content-addressed path, so a library is loaded once however many Kernels use it.
_LOADED: dict[str, tuple] = {}


def load_library(path: str, prototype: str):
    """``(ffi, lib)`` for the library at ``path`` with this C prototype, loaded once and
    never unloaded."""
    if path not in _LOADED:
        ffi = FFI()
        ffi.cdef(prototype + ";")
        omp.share_loaded_runtime()      # one OpenMP runtime, one thread pool (emit_c.omp)
        workspace.load_pool(os.path.dirname(path))     # one workspace pool, too
        _LOADED[path] = (ffi, ffi.dlopen(path, ffi.RTLD_NOW | ffi.RTLD_NODELETE))
        omp.configure_threads()
    return _LOADED[path]


def build_kernel(func: LoweredFunc, *, shapes: dict | None = None, target=None, flags=(),
                 cache: BuildCache | None = None) -> Kernel:
    """Emit ``func`` as C for ``target`` (the host by default), compile it with the target's
    compiler and flags plus ``flags`` (or reuse the cache) and load it.

    ``shapes`` fixes sizes at build time (``{"K": 256}``): they become C constants.
    """
    target = as_target(target)
    module = HostC(func, shapes, target).module()
    built = (cache or BuildCache()).build(module.source,
                                          (*kernel_flags(target, module.source), *flags),
                                          target.compiler)
    return Kernel(func, module, built, fixed_shapes(func, shapes or {}), target)


def _check_sizes_bindable(func: LoweredFunc, fixed) -> None:
    """Every free size must come from a plain dimension of an input, or be fixed."""
    bindable = {v for b in func.params[:func.num_inputs] for d in b.shape
                for v in te.free_vars(d)}     # plain (M) or solved for (H + 2), see sizes.bind
    for v in func.shape_vars:
        if v not in fixed and v not in bindable:
            raise BuildError(f"the size {v.name} of {func.name} cannot be read off any input's "
                             f"shape", hint=f"fix it at build time: shapes={{'{v.name}': ...}}")
    for b in func.params:
        if b.strides is not None:
            raise BuildError(f"parameter {b.name} of {func.name} has explicit strides; "
                             f"kernels take dense row-major arrays")
        for dim in b.shape:
            for x in te.walk(dim):
                if not isinstance(x, (te.Var, te.Const, te.Binary, te.Intrinsic)) or \
                        (isinstance(x, te.Var) and x not in func.shape_vars):
                    raise BuildError(f"the shape of {b.name} ({format_expr(dim)}) is not "
                                     f"an integer expression of {func.name}'s sizes")


def _check_input(buf: Buffer, value, dtype: np.dtype):
    if not buf.shape and not isinstance(value, np.ndarray):
        return _scalar_argument(buf, value)
    if not isinstance(value, np.ndarray):
        if _foreign(value):
            raise _Foreign
        raise not_an_array(f"argument {buf.name}", value, dtype, _type_text(buf))
    if value.dtype != dtype:
        raise wrong_dtype(f"argument {buf.name}", buf.name, value.dtype, dtype,
                          _type_text(buf))
    if value.ndim != len(buf.shape):
        raise CallError(f"argument {buf.name} has rank {value.ndim} (shape {value.shape}), "
                        f"expected rank {len(buf.shape)}: {_describe(buf)}")
    if not buf.shape:
        if buf.dtype in STORAGE_FLOATS:     # passed as its bits (printer.prototype)
            return _bits(value)
        return bool(value.view(np.uint8)) if buf.dtype == "bool" else value.item()
    if buf.dtype == "bool":
        value = canonical_bools(value)
    return value        # a strided one is copied once the call's sizes are checked (_prepare)


def _scalar_argument(buf: Buffer, value):
    """Python and numpy scalars for a rank-0 parameter, checked like arrays."""
    dtype = to_numpy(buf.dtype)
    if isinstance(value, np.generic):
        if value.dtype != dtype:
            raise wrong_dtype(f"argument {buf.name}", buf.name, value.dtype, dtype, buf.dtype)
        return _bits(value) if buf.dtype in STORAGE_FLOATS else value.item()
    if buf.dtype == "bool":
        ok = isinstance(value, bool)
    elif is_float(buf.dtype):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and buf.dtype in STORAGE_FLOATS:
            return _bits(np.asarray(value, np.float64).astype(dtype))
    else:
        info = np.iinfo(dtype)
        ok = isinstance(value, int) and not isinstance(value, bool) and \
            info.min <= value <= info.max
    if not ok:
        if _foreign(value):         # a 0-d tensor
            raise _Foreign
        raise CallError(f"argument {buf.name} must be a {buf.dtype} scalar, got {value!r}")
    return value


def _bits(value: np.ndarray) -> int:
    """The bits of a storage float scalar, as its rank-0 parameter takes it."""
    return int(value.view(f"u{value.dtype.itemsize}"))


class _Foreign(Exception):
    """An argument is an array of another library (`tdsl.torch_bridge.interop`): the call
    is redone on numpy views of the arguments. Raised, not tested for, so that a call on
    numpy arrays pays nothing for the other kinds."""


def _interop():
    """`tdsl.torch_bridge.interop`, imported on the first call with such an argument."""
    global _INTEROP
    if _INTEROP is None:
        from ..torch_bridge import interop
        _INTEROP = interop
    return _INTEROP


_INTEROP = None
# torch.Tensor once interop has seen a tensor (torch is never imported here): a call whose
# first argument is one goes straight to the tensor path, without the raise of _Foreign
_TENSOR = None


def _foreign(value) -> bool:
    """Whether ``value`` is a DLPack or buffer-protocol array (a PyTorch tensor...)."""
    if type(value) in _FOREIGN_TYPES:
        return True
    if _interop().is_foreign(value):
        if len(_FOREIGN_TYPES) < 64:
            _FOREIGN_TYPES.add(type(value))
        return True
    return False


_FOREIGN_TYPES: set = set()


def _foreign_call(kernel, arrays, out, names=None):
    """``kernel(*arrays, out=out)`` on tensors or other foreign arrays (`Kernel` and the
    wrappers of `tdsl.specialize` and `tdsl.per_rank` convert them once, outermost)."""
    return (_INTEROP or _interop()).call(kernel, arrays, out,
                                         kernel._input_names if names is None else names)


def _type_text(buf: Buffer) -> str:
    """``f32[N, K]``: the parameter's type as the reference's messages write it."""
    return _describe(buf).partition(": ")[2]


def _describe(buf: Buffer) -> str:
    dims = ", ".join(format_expr(d) for d in buf.shape)
    return f"{buf.name}: {buf.dtype}[{dims}]" if buf.shape else f"{buf.name}: {buf.dtype}"
