"""The blocked layout's two widths, tested on any host.

The layout pass blocks activations by the target's lanes (NCHW[lanes]c): 8 on AVX2
(``c -march=x86-64-v3``), 16 on AVX-512 (``c -march=x86-64-v4``). A test of the layout must
hold for both, whichever host runs it:

- `isa_target(block)`: the ISA whose vectors are ``block`` floats, for tests of the graph the
  passes make (no kernel runs) and for builds; its kernels run only where the host has it;
- `run_target(block)`: a target whose kernels run here and block by ``block``: the ISA itself
  where the host has it, else AVX2 code with ``block`` lanes forced (``c -march=x86-64-v3
  -lanes=16``: the layout pass and the schedules take 16-float vectors, which gcc's vector
  types carry as pairs of AVX2 registers). That runs the very graph an AVX-512 host runs,
  kernels and all, on an AVX2 host (and the 8-lane one on an AVX-512 host), so a block width
  the host does not have natively is checked by running it, not only by building it.
"""
from __future__ import annotations

import pytest

from tdsl.errors import TdslError
from tdsl.target import Target, host_arch

BLOCKS = (8, 16)
ISA = {8: "c -march=x86-64-v3", 16: "c -march=x86-64-v4"}


def isa_target(block: int) -> str:
    """``ISA[block]``, skipping the test where this machine cannot even build for it (a
    host that is no x86, without an x86 cross compiler)."""
    try:
        Target(ISA[block])
    except TdslError as e:
        pytest.skip(f"{ISA[block]} does not build here: {e}")
    return ISA[block]


def runnable(spec: str) -> bool:
    try:
        return Target(spec).unrunnable_reason() is None
    except TdslError:
        return False


def run_target(block: int) -> str:
    """A target blocking by ``block`` whose kernels run on this machine."""
    if runnable(ISA[block]):
        return ISA[block]
    if host_arch() == "x86_64" and runnable(ISA[8]):
        return f"{ISA[8]} -lanes={block}"
    return f"c -lanes={block}"
