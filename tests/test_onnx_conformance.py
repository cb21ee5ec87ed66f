"""ONNX's operator conformance suite: every node case the installed onnx wheel generates is
imported, built for C, called and compared with its recorded outputs (`onnx_cases`).

A case passes, or is in tests/onnx_expected_refusals.txt with its reason and is refused with
a clear `TdslError`. A listed case that passes fails here, so the list only shrinks; a wrong
answer or a raw exception is never allowed. `python tests/onnx_cases.py` prints the counts.

The ``_expanded`` cases (an operator as the function body ONNX defines: many small nodes,
several kernels to build each) run under ``-m slow``; the default run has every other case.
"""
from __future__ import annotations

import shutil

import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")

import onnx_cases  # noqa: E402

CASES = {c.name: c for c in onnx_cases.cases()}
EXPECTED = onnx_cases.expected_refusals()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if "_expanded" in n else n for n in sorted(CASES)])
def test_onnx_node_case(name):
    status, detail = onnx_cases.run_case(CASES[name])
    if name in EXPECTED:
        assert status != "pass", (f"{name} passes now: remove it from "
                                  f"tests/onnx_expected_refusals.txt")
        assert status == "refused", f"{name} should be refused clearly, got {status}: {detail}"
    else:
        assert status == "pass", f"{status}: {detail}"


def test_expected_refusals_name_real_cases():
    unknown = sorted(set(EXPECTED) - set(CASES))
    assert not unknown, f"tests/onnx_expected_refusals.txt lists unknown cases: {unknown[:5]}"
    assert all(EXPECTED.values()), "every expected refusal gives its reason"
