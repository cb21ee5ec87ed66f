"""A graph's arguments: weights from an .npz or a mapping, inputs at a call, and the sizes
they bind. Every mistake is a `TdslError` (a `CallError` for inputs) naming the argument."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .errors import CallError, TdslError
from .lowering import te
from .lowering.dtypes import to_numpy
from .lowering.graph.ir import Graph as GraphIR, eval_size


def load_params(params, ir: GraphIR) -> dict[str, np.ndarray]:
    """Weights from a ``.npz`` path (loaded with pickling refused: an array of Python
    objects is an error, never code run) or a mapping; each checked against its
    ``param``: none missing, none extra, dtypes exact, ranks and fixed sizes agreeing."""
    if params is None:
        params = {}
    if isinstance(params, (str, Path)):
        try:
            with np.load(params, allow_pickle=False) as npz:
                params = {k: npz[k] for k in npz.files}
        except OSError as e:
            raise TdslError(f"can't read weights {params}: {e}") from None
        except ValueError as e:
            raise TdslError(f"can't read weights {params}: {e}",
                            hint="weights are numeric arrays; object arrays (pickles) are "
                                 "refused") from None
        except (zipfile.BadZipFile, EOFError) as e:
            raise TdslError(f"can't read weights {params}: not an .npz file ({e})") from None
    values = ir.value_map()
    missing = [p for p in ir.params if p not in params]
    if missing:
        raise TdslError(f"graph {ir.name}: weight '{missing[0]}' is missing"
                        + (f" (and {', '.join(missing[1:])})" if missing[1:] else ""),
                        ir.span, hint=f"the weights given: {', '.join(params) or 'none'}")
    extra = [k for k in params if k not in ir.params]
    if extra:
        raise TdslError(f"graph {ir.name} has no param '{extra[0]}'", ir.span,
                        hint=f"its params: {', '.join(ir.params) or 'none'}")
    out = {}
    for name in ir.params:
        a = params[name]
        if not isinstance(a, np.ndarray):
            raise TdslError(f"weight '{name}' must be a numpy array, got {type(a).__name__}")
        _check_array(f"weight '{name}'", a, values[name])
        out[name] = np.require(a, requirements="C")   # ascontiguousarray makes rank 0 rank 1
    bind_sizes(ir, out, partial=True)        # sizes named by several weights agree
    return out


def _check_array(what: str, a: np.ndarray, v) -> None:
    want = to_numpy(v.dtype)
    if a.dtype != want:
        raise TdslError(f"{what} is {a.dtype}, expected {want} ({v.dtype})",
                        hint=f"convert it: a.astype(np.{want})")
    if a.ndim != len(v.shape):
        raise TdslError(f"{what} has shape {a.shape}, expected rank {len(v.shape)} "
                        f"([{', '.join(map(str, v.shape))}])")


def check_inputs(ir: GraphIR, inputs) -> dict[str, np.ndarray]:
    if len(inputs) != len(ir.inputs):
        raise CallError(f"graph {ir.name} takes {len(ir.inputs)} input(s) "
                        f"({', '.join(ir.inputs)}), got {len(inputs)}")
    out = {}
    for name, a in zip(ir.inputs, inputs):
        if isinstance(a, np.generic):       # a numpy scalar for a rank-0 input
            a = np.asarray(a)
        if not isinstance(a, np.ndarray):
            raise CallError(f"input '{name}' must be a numpy.ndarray, got {type(a).__name__}")
        try:
            _check_array(f"input '{name}'", a, ir.value(name))
        except TdslError as e:
            raise CallError(e.message, hint=e.hint) from None
        out[name] = a
    return out


def bind_sizes(ir: GraphIR, arrays: dict, given: dict | None = None, partial=False
               ) -> dict[str, int]:
    """The graph's sizes from ``given`` and the arrays' shapes (plain size names bind,
    every other dimension is checked); with ``partial``, sizes nothing tells are left out."""
    sizes = {k: int(v) for k, v in (given or {}).items()}
    values = ir.value_map()
    for name, a in arrays.items():
        for dim, n in zip(values[name].shape, a.shape):
            if isinstance(dim, te.Var):
                sizes.setdefault(dim.name, int(n))
    env = sizes
    for name, a in arrays.items():
        v = values[name]
        for d, (dim, n) in enumerate(zip(v.shape, a.shape)):
            try:
                expect = eval_size(dim, env)
            except KeyError:
                continue
            if expect != n:
                kind = "weight" if v.kind == "param" else "input"
                raise TdslError(f"{kind} '{name}' has shape {a.shape}, but dimension {d} "
                                f"must be {expect}{_why(dim, env)}, got {n}",
                                hint=f"'{name}' is declared [{', '.join(map(str, v.shape))}]"
                                     f" with {sizes_text(sizes)}")
    if not partial:
        missing = [s for s in ir.sizes if s not in sizes]
        if missing:
            raise CallError(f"graph {ir.name}: size {missing[0]} is not known from the inputs "
                            f"or weights; give it with shapes={{'{missing[0]}': ...}}")
    return sizes


def _why(dim, env) -> str:
    """Where a dimension's required size comes from: `` (B = 1)``, `` (N + 1 with N = 3)``,
    nothing for a literal."""
    if not isinstance(dim, te.Expr):
        return ""
    if isinstance(dim, te.Var):
        return f" ({dim} = {env[dim.name]})"
    names = sorted({x.name for x in te.walk(dim) if isinstance(x, te.Var)})
    if not names:
        return ""
    return f" ({dim} with {', '.join(f'{k} = {env[k]}' for k in names)})"


def sizes_text(sizes) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(sizes.items())) or "fixed sizes"
