"""Arrays that are not numpy's, in and out of tdsl's kernels and graph modules, no copies.

A kernel takes numpy arrays; anything else that speaks DLPack (``__dlpack__``: PyTorch
tensors, JAX and CuPy arrays...) or the buffer protocol (``memoryview``, ``array.array``)
is viewed as a numpy array over the same memory, and the outputs are handed back in the
caller's kind: a PyTorch tensor in gives a PyTorch tensor out, sharing the output's memory
(``torch.from_numpy``, or the library's ``from_dlpack``). Nothing is copied either way,
which is why a non-contiguous tensor is refused (a kernel reads dense row-major memory:
copying it silently would hide a copy the caller can make explicit) where a numpy view is
copied, as it always was.

Refusals are `CallError`s naming the argument, worded as for numpy arrays: wrong dtype,
non-contiguous, on another device, requiring grad (with the hint to detach or to register
the op with a backward, `tdsl.torch.custom_op`).

PyTorch tensors take a faster path than DLPack's (``Tensor.numpy`` and ``torch.from_numpy``
cost 0.5 us each; ``np.from_dlpack`` 2 us), since the round trip's goal is 2 us over a
numpy call. torch is never imported here: a tensor's presence means it already is.
"""
from __future__ import annotations

import sys

import numpy as np

from ..errors import CallError

# DLPack / buffer objects to numpy: kind name -> converter (filled on first use by type)
_KINDS: dict[type, str] = {}


class Foreign(Exception):
    """Raised by a kernel's argument check on a non-numpy array: the call is redone by
    `call` with numpy views of the arguments. (An exception rather than a test on every
    argument, so that a call on numpy arrays pays nothing for the other kinds.)"""


def kind_of(value) -> str | None:
    """``"torch"`` for a PyTorch tensor, ``"dlpack"`` for another DLPack exporter,
    ``"buffer"`` for a buffer-protocol object, None for anything else (a list, a
    scalar, a numpy array)."""
    t = type(value)
    kind = _KINDS.get(t, False)
    if kind is not False:
        return kind
    if isinstance(value, (np.ndarray, np.generic, bool, int, float, complex, str)):
        kind = None
    elif _is_torch_tensor(t):
        kind = "torch"
    elif hasattr(value, "__dlpack__"):
        kind = "dlpack"
    else:
        try:
            memoryview(value)
            kind = "buffer"
        except TypeError:
            kind = None
    if len(_KINDS) < 256:
        _KINDS[t] = kind
    return kind


def _is_torch_tensor(t: type) -> bool:
    torch = sys.modules.get("torch")
    if torch is None or not issubclass(t, torch.Tensor):
        return False
    _TORCH_TENSOR[0], _FROM_NUMPY[0] = torch.Tensor, torch.from_numpy
    from ..emit_c import kernel
    kernel._TENSOR = torch.Tensor
    return True


def is_foreign(value) -> bool:
    return kind_of(value) is not None


def as_numpy(value, what: str, grad_ok: bool = False) -> np.ndarray:
    """A numpy array over ``value``'s memory (no copy), or a `CallError` naming ``what``
    ("argument X") saying why it cannot be one."""
    kind = kind_of(value)
    if kind == "torch":
        return _torch_to_numpy(value, what, grad_ok)
    if kind == "dlpack":
        try:
            a = np.from_dlpack(value)
        except (BufferError, TypeError, RuntimeError, ValueError) as e:
            raise CallError(f"{what} ({type(value).__name__}) cannot be read as a host "
                            f"array through DLPack: {e}",
                            hint="host kernels take contiguous CPU arrays of a tdsl dtype") \
                from None
    elif kind == "buffer":
        try:
            a = np.asarray(memoryview(value))
        except (TypeError, ValueError) as e:
            raise CallError(f"{what} ({type(value).__name__}) cannot be read through the "
                            f"buffer protocol: {e}") from None
    else:
        return value
    if a.ndim and not a.flags.c_contiguous:
        raise CallError(f"{what} ({type(value).__name__}) is not C-contiguous (strides "
                        f"{a.strides}); kernels read dense row-major memory and copy nothing",
                        hint="pass a contiguous copy")
    return a


def _torch_to_numpy(t, what: str, grad_ok: bool) -> np.ndarray:
    if t.requires_grad and not grad_ok:
        raise CallError(f"{what} requires grad, and a tdsl kernel has no backward",
                        hint="pass it .detach()ed, or register the op with its backward: "
                             "tdsl.torch.custom_op(op, name='mylib::op', backward=...)")
    if not t.is_cpu:
        raise CallError(f"{what} is a tensor on {t.device}; host (C) kernels take CPU "
                        f"tensors", hint="pass .cpu(), or build the op for that device's "
                                         "target")
    if not t.is_contiguous():
        raise CallError(f"{what} is a non-contiguous tensor (shape {tuple(t.shape)}, "
                        f"strides {tuple(t.stride())}); kernels read dense row-major memory "
                        f"and copy nothing", hint="pass .contiguous()")
    try:
        return t.detach().numpy() if t.requires_grad else t.numpy()
    except (TypeError, RuntimeError) as e:     # bfloat16, a conjugate view...
        raise CallError(f"{what} has dtype {str(t.dtype).replace('torch.', '')}, which no "
                        f"tdsl type is ({e})",
                        hint="tdsl's types: f32, f64, i8, i16, i32, i64, u8, bool") from None


def back(kind_value, arrays):
    """``arrays`` (numpy, the call's outputs) in the kind of ``kind_value`` (an argument
    of the call): the same memory, no copy."""
    kind = kind_of(kind_value)
    if kind == "torch":
        wrap = sys.modules["torch"].from_numpy
    elif kind == "dlpack":
        lib = sys.modules.get(type(kind_value).__module__.partition(".")[0])
        wrap = getattr(lib, "from_dlpack", None) or (lambda a: a)
    else:
        return arrays
    return [wrap(a) for a in arrays]


def _dtype_hint(e: CallError, kind: str) -> CallError:
    """A wrong-dtype error worded for a tensor (``.to(torch.float32)``), not for numpy."""
    if kind == "torch" and e.hint and ".astype(np." in e.hint:
        name = e.hint.rpartition("np.")[2].rstrip(")")
        e.hint = e.hint.partition(".astype(")[0] + f".to(torch.{name})"
    return e


def _views(arrays, names):
    """``(views, first)``: numpy views of ``arrays`` and the first foreign one (whose kind
    the outputs take). One pass, every string built only for an error: this is the
    tensor round trip's Python time."""
    views = []
    first = None
    for a, name in zip(arrays, names):
        kind = _KINDS.get(type(a), False)
        if kind is False:
            kind = kind_of(a)
        if kind is None:
            views.append(a)
            continue
        if first is None:
            first = a
        if kind == "torch" and not a.requires_grad and a.is_cpu and a.is_contiguous():
            try:
                views.append(a.numpy())
                continue
            except (TypeError, RuntimeError):
                pass                # worded by as_numpy
        views.append(as_numpy(a, f"argument {name}"))
    views += arrays[len(names):]        # the count is checked by the kernel
    return views, first


def _out_views(out):
    if out is None:
        return None, None
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    first = next((o for o in outs if kind_of(o) is not None), None)
    views = [as_numpy(o, "out= array") for o in outs]
    return (views if isinstance(out, (tuple, list)) else views[0]), first


def call(kernel, arrays, out, names):
    """Call ``kernel`` (numpy in, numpy out) on ``arrays`` of other kinds: views in, the
    outputs back in the first foreign argument's kind. ``out=`` arrays are viewed too, and
    returned as given. ``names`` name the arguments, for the errors."""
    T = _TORCH_TENSOR[0]
    if out is None and T is not None:
        # the common case, all tensors, contiguous, on the CPU, of numpy's dtypes and
        # requiring no grad, in C loops: a round trip's Python time is its whole cost
        try:
            views = list(map(T.numpy, arrays)) if all(map(T.is_contiguous, arrays)) else None
        except (TypeError, RuntimeError):      # a non-tensor, grad, device, dtype: worded below
            views = None
        if views is not None:
            try:
                result = kernel(*views)
            except CallError as e:
                raise _dtype_hint(e, "torch") from None
            if type(result) is np.ndarray:
                return _FROM_NUMPY[0](result)
            return tuple(map(_FROM_NUMPY[0], result))
    views, first = _views(arrays, names)
    np_out, first_out = _out_views(out)
    try:
        result = kernel(*views, out=np_out)
    except CallError as e:
        raise _dtype_hint(e, kind_of(first if first is not None else first_out)) from None
    if out is not None:
        return out
    if type(first) is _TORCH_TENSOR[0]:
        return _FROM_NUMPY[0](result) if type(result) is np.ndarray else \
            tuple(map(_FROM_NUMPY[0], result))
    if isinstance(result, tuple):
        return tuple(back(first, result))
    return back(first, [result])[0]


# torch.Tensor and torch.from_numpy once torch is seen (never imported here)
_TORCH_TENSOR: list = [None]
_FROM_NUMPY: list = [None]


def bind(kernel, arrays, out, names):
    """`Kernel.bind` on arrays of other kinds: ``(run, outputs)``, the outputs in the first
    foreign argument's kind (or ``out=`` as given)."""
    views, first = _views(arrays, names)
    np_out, first_out = _out_views(out)
    first = first if first is not None else first_out
    try:
        run, outputs = kernel.bind(*views, out=np_out)
    except CallError as e:
        raise _dtype_hint(e, kind_of(first)) from None
    return run, (out if out is not None else back(first, outputs))
