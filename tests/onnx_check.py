"""An ONNX model imported, built for C and called, its outputs compared with expected ones:
the check the converter families' tests share (they differ in how they build models)."""
from __future__ import annotations

import warnings

import numpy as np

import tdsl
from tdsl.onnx_import import convert_model


def run_imported(model, *inputs) -> tuple[str, tuple]:
    """The .tdsl text of ``model`` and its outputs on ``inputs`` (always a tuple)."""
    text, params = convert_model(model, "net")
    with warnings.catch_warnings():      # schedule fallbacks of generated ops are not ours
        warnings.simplefilter("ignore")
        got = tdsl.loads(text)["net"].build("c", params=params)(*inputs)
    return text, got if isinstance(got, tuple) else (got,)


def assert_outputs_match(got, want, rtol=1e-5, atol=1e-5) -> None:
    """Same count, and each output of the same dtype and shape, values within tolerance."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
