"""Random graphs (chains and diamonds of injective and complex ops) give the same numbers
fused and unfused, with the blocked layout and without, and the ops' references' numbers.
Hypothesis draws the graphs; builds need gcc. The default run draws a few (compiling is
slow); ``-m slow`` draws many."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tdsl

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

C, H = 4, 6
# name -> (number of tensor arguments, the text of the call with its params)
STEPS = ("conv", "dwconv", "relu", "sigmoid", "bias", "bn", "clip", "add", "mul")


@st.composite
def graphs(draw, max_steps=6):
    """A graph's text: each step reads one or two earlier values (a diamond when a later
    step reads a value an earlier one also read)."""
    n = draw(st.integers(1, max_steps))
    values, params, lines = ["x"], [], []
    for k in range(n):
        kind = draw(st.sampled_from(STEPS))
        a = draw(st.sampled_from(values))
        out = "y" if k == n - 1 else f"v{k}"
        if kind == "conv":
            params.append(f"param w{k}: f32[{C}, {C}, 3, 3]")
            call = f"conv2d({a}, w{k}; padding=1)"
        elif kind == "dwconv":
            params.append(f"param w{k}: f32[{C}, 1, 3, 3]")
            call = f"depthwise_conv2d({a}, w{k}; padding=1)"
        elif kind == "bias":
            params.append(f"param b{k}: f32[{C}]")
            call = f"bias_add({a}, b{k})"
        elif kind == "bn":
            params += [f"param {p}{k}: f32[{C}]" for p in ("g", "be", "m", "s")]
            call = f"batch_norm({a}, g{k}, be{k}, m{k}, s{k})"
        elif kind == "clip":
            call = f"clip({a}; lo=-0.5, hi=0.5)"
        elif kind in ("add", "mul"):
            call = f"{kind}({a}, {draw(st.sampled_from(values))})"
        else:
            call = f"{kind}({a})"
        lines.append(f"    {out} = {call}")
        values.append(out)
    body = "\n".join(["    " + p for p in params] + lines)
    return (f"import std\ngraph g(x: f32[1, {C}, {H}, {H}]) -> y: f32[1, {C}, {H}, {H}] {{\n"
            f"{body}\n}}\n")


def check(text: str) -> None:
    g = tdsl.loads(text)["g"]
    p = g.random_params(seed=0)
    x = np.random.default_rng(1).standard_normal((1, C, H, H)).astype(np.float32)
    want = g.reference(x, params=p)
    fused = g.build(params=p, layout=False)(x)
    unfused = g.build(params=p, fuse=False, fold=False, layout=False)(x)
    np.testing.assert_allclose(fused, unfused, rtol=1e-4, atol=1e-4, err_msg=text)
    np.testing.assert_allclose(fused, want, rtol=1e-4, atol=1e-4, err_msg=text)
    # the blocked layout, at lanes = C so that the convolutions take it (the host's lanes
    # would leave C channels NCHW), fused and not
    for fuse in (True, False):
        blocked = g.build(f"c -lanes={C}", params=p, layout=True, fuse=fuse)(x)
        np.testing.assert_allclose(blocked, want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"layout on, fuse={fuse}\n{text}")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_random_graphs_fused_and_unfused_agree(text):
    check(text)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_steps=10))
def test_random_graphs_fused_and_unfused_agree_exhaustively(text):
    check(text)


def test_a_diamond_of_convs_joined_by_an_add():
    check(f"""import std
graph g(x: f32[1, {C}, {H}, {H}]) -> y: f32[1, {C}, {H}, {H}] {{
    param w0: f32[{C}, {C}, 3, 3]
    param w1: f32[{C}, {C}, 3, 3]
    a = conv2d(x, w0; padding=1)
    b = conv2d(x, w1; padding=1)
    r = relu(b)
    s = add(a, r)
    y = sigmoid(s)
}}""")
