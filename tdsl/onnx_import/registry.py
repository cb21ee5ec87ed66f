"""The one registry of ONNX converters: op type -> ``convert(cv, node, attrs)`` and the
attributes it understands (any other is an error naming the node). Family modules register
with `converter`; docs/onnx.md's table of supported operators is printed from here."""
from __future__ import annotations

CONVERTERS: dict = {}
ATTRIBUTES: dict[str, set[str]] = {}
FAMILY: dict[str, str] = {}         # op type -> the module (family) that converts it


def converter(*names, attrs=()):
    def register(fn):
        for n in names:
            if n in CONVERTERS:
                raise RuntimeError(f"two converters for ONNX {n}")
            CONVERTERS[n] = fn
            ATTRIBUTES[n] = set(attrs)
            FAMILY[n] = fn.__module__.rsplit(".", 1)[-1]
        return fn
    return register


def opt(node, k):
    """The name of ``node``'s optional input ``k``, or None when absent or empty."""
    return node.input[k] if len(node.input) > k and node.input[k] else None


def ints(v, n, default):
    return [int(x) for x in v] if v is not None else [default] * n


def text(v) -> str:
    """A string attribute (onnx gives bytes)."""
    return v.decode() if isinstance(v, bytes) else v
