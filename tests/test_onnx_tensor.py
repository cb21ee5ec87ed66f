"""ONNX import of the tensor and shape operators (tdsl/onnx_import/tensor.py) in
configurations the conformance cases lack: indices computed by the graph, every pair of
dtypes for Cast, scatters with duplicates, pads wider than the input, dtypes other than f32;
each checked against onnx's reference implementation."""
from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="needs the onnx package (pip install 'tdsl[onnx]')")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tdsl  # noqa: E402
from tdsl.errors import TdslError  # noqa: E402
from tdsl.onnx_import import convert_model  # noqa: E402

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

DTYPES = {"f32": np.float32, "f64": np.float64, "i64": np.int64, "i32": np.int32,
          "i16": np.int16, "i8": np.int8, "u8": np.uint8, "bool": np.bool_}


def _model(nodes, inputs, outputs, inits=(), opset=18):
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype),
                                         v.shape) for n, v in inputs.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs]
    g = helper.make_graph(nodes, "g", ins, outs,
                          [numpy_helper.from_array(v, n) for n, v in dict(inits).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def check(nodes, inputs, outputs, inits=(), opset=18):
    """Build the graph of ``nodes`` and compare every output with the reference."""
    model = _model(nodes, inputs, outputs, inits, opset)
    want = ReferenceEvaluator(model).run(None, dict(inputs))
    text, params = convert_model(model, "net")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = tdsl.loads(text)["net"].build("c", params=params)
        got = module(*inputs.values())
    got = got if isinstance(got, (tuple, list)) else [got]
    assert len(got) == len(want)
    for name, g, w in zip(outputs, got, want):
        g = np.asarray(g)
        assert g.dtype == w.dtype, (name, g.dtype, w.dtype)
        assert g.shape == w.shape, (name, g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-6,
                                   err_msg=name)
    return text


def refusal(nodes, inputs, outputs, inits=(), opset=18) -> str:
    with pytest.raises(TdslError) as e:
        convert_model(_model(nodes, inputs, outputs, inits, opset), "net")
    return str(e.value)


def _cast_matrix(dtypes, inputs, pairs=lambda src, dst: True):
    nodes, outs = [], []
    for src in dtypes:
        for dst in dtypes:
            if src != dst and pairs(src, dst):
                outs.append(f"y_{src}_{dst}")
                nodes.append(helper.make_node(
                    "Cast", [f"x_{src}"], [outs[-1]],
                    to=helper.np_dtype_to_tensor_dtype(np.dtype(DTYPES[dst]))))
    check(nodes, inputs, outs)


@needs_gcc
@pytest.mark.parametrize("sources", [("f32", "f64", "i64"), ("i32", "i16", "i8", "u8")])
def test_cast_between_every_pair_of_numeric_dtypes(sources):
    nums = [d for d in DTYPES if d != "bool"]
    inputs = {f"x_{d}": np.array([0, 1, 3, 7, 100, 2], DTYPES[d]) for d in nums}
    inputs["x_f32"] = np.array([0.0, 1.5, 3.0, 7.9, 100.0, 0.25], np.float32)
    inputs["x_f64"] = inputs["x_f64"] + 0.5
    _cast_matrix(nums, inputs, lambda src, dst: src in sources)


@needs_gcc
def test_bool_tensors_cast_and_move():
    inputs = {f"x_{d}": np.array([0, 1, 3, 0, 100, 2], DTYPES[d]) for d in DTYPES}
    inputs["x_f32"] = np.array([0.0, 1.5, np.nan, 0.0, -100.0, 0.25], np.float32)
    inputs["x_bool"] = inputs["x_u8"] > 0
    nodes = [helper.make_node("Concat", ["x_bool", "x_bool"], ["c"], axis=-1),
             helper.make_node("Pad", ["x_bool", "pads"], ["p"], mode="reflect"),
             helper.make_node("Expand", ["x_bool", "eshape"], ["e"])]
    check(nodes, {"x_bool": inputs["x_bool"]}, ["c", "p", "e"],
          {"pads": np.array([2, 3], np.int64), "eshape": np.array([2, 1], np.int64)})
    _cast_matrix(list(DTYPES), inputs, lambda src, dst: "bool" in (src, dst))


@needs_gcc
def test_integer_casts_wrap_as_numpy_does():
    x = {"x_i64": np.array([300, -1, -200, 70000, 2**40 + 5, -129], np.int64)}
    _cast_matrix(["i64", "i32", "i16", "i8", "u8"], x, lambda src, dst: src == "i64")


def test_unsupported_casts_are_refused_naming_the_dtype():
    x = {"x": np.ones(3, np.float32)}
    msg = refusal([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT4)], x, ["y"])
    assert "int4" in msg and "Cast" in msg     # f16, bf16 and the 8-bit floats are carried
    msg = refusal([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING)], x, ["y"])
    assert "Cast" in msg


@needs_gcc
@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2FNUZ])
def test_casts_to_8_bit_floats_saturate_unless_told_not_to(to):
    """As ONNX's reference: from floats and from integers, ±inf and NaN included."""
    x = {"x": np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 300.5, -0.3], np.float32),
         "n": np.array([100000, -70000, 3, 0, -1, 449, 241], np.int32)}
    nodes = [helper.make_node("Cast", [src], [f"y_{src}_{sat}"], to=to, saturate=sat)
             for src in x for sat in (1, 0)]
    check(nodes, x, [n.output[0] for n in nodes], opset=21)


@needs_gcc
def test_gathers_and_scatters_with_computed_indices():
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((3, 5, 4)).astype(np.float32),
              "i": np.array([[4, -1], [0, 2]], np.int32),
              "il": np.array([[3, -1], [0, -4]], np.int16),
              "ie": np.array([[[1, 0, 2, -3]], [[2, 2, 1, 0]]], np.int64),
              "ige": rng.integers(-5, 5, (3, 2, 4)).astype(np.int32),
              "ind": np.array([[[1, -1], [0, 0]], [[4, 3], [-5, 2]], [[2, 2], [3, -4]]],
                              np.int64),
              "u": rng.standard_normal((2, 1, 4)).astype(np.float32),
              "jn": np.array([[0, 4], [2, 1], [0, 4], [-3, -1]], np.int64),
              "un": rng.standard_normal((4, 4)).astype(np.float32)}
    nodes = [
        # indices computed by the graph (an Add), data computed too (a Neg)
        helper.make_node("Add", ["i", "one"], ["i2"]),
        helper.make_node("Neg", ["x"], ["nx"]),
        helper.make_node("Gather", ["nx", "i2"], ["g1"], axis=1),
        helper.make_node("Gather", ["x", "il"], ["g2"], axis=-1),
        helper.make_node("GatherElements", ["x", "ige"], ["ge"], axis=1),
        helper.make_node("GatherND", ["x", "ind"], ["gn"], batch_dims=1),
        # duplicate indices: the last update wins; updates smaller than the data
        helper.make_node("ScatterElements", ["x", "ie", "ue"], ["se"], axis=1),
        helper.make_node("ScatterElements", ["x", "ie", "ue"], ["se_add"], axis=1,
                         reduction="add"),
        helper.make_node("ScatterElements", ["x", "ie", "ue"], ["se_max"], axis=1,
                         reduction="max"),
        helper.make_node("Reshape", ["jn", "shape2"], ["jn2"]),
        helper.make_node("ScatterND", ["x", "jn2", "un2"], ["sn"]),
        helper.make_node("ScatterND", ["x", "jn2", "un2"], ["sn_mul"], reduction="mul"),
        helper.make_node("ScatterND", ["x", "jn2", "un2"], ["sn_min"], reduction="min"),
        helper.make_node("Reshape", ["un", "shape3"], ["un2"]),
        helper.make_node("Tile", ["u", "reps"], ["ue"]),
    ]
    nodes = nodes[:-2] + nodes[-2:]
    nodes.insert(6, nodes.pop())                 # Tile before its users
    nodes.insert(9, nodes.pop())                 # the updates' Reshape before ScatterND
    inits = {"one": np.array(0, np.int32), "reps": np.array([1, 1, 1], np.int64),
             "shape2": np.array([2, 2, 2], np.int64), "shape3": np.array([2, 2, 4], np.int64)}
    text = check(nodes, inputs, ["g1", "g2", "ge", "gn", "se", "se_add", "se_max", "sn",
                                 "sn_mul", "sn_min"], inits)
    # the indices are graph inputs: they stay tensors, not constants
    assert "graph net(" in text and "i: i32[2, 2]" in text


@needs_gcc
def test_layout_operators_on_other_dtypes():
    rng = np.random.default_rng(1)
    x = rng.integers(-50, 50, (2, 3, 4)).astype(np.int32)
    b = rng.integers(-9, 9, (2, 3, 4)).astype(np.int8)
    inputs = {"x": x, "b": b, "d": rng.integers(0, 9, (1, 8, 2, 3)).astype(np.uint8),
              "kk": np.array(-2, np.int64), "pv": np.array(7, np.int32)}
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
        helper.make_node("Concat", ["b", "b"], ["c"], axis=-1),
        helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
        helper.make_node("Pad", ["x", "pads"], ["p_reflect"], mode="reflect"),
        helper.make_node("Pad", ["x", "pads_big"], ["p_edge"], mode="edge"),
        helper.make_node("Pad", ["x", "pads_big"], ["p_wrap"], mode="wrap"),
        helper.make_node("Pad", ["b", "pads_ax", "", "axes"], ["p_i8"]),
        helper.make_node("Neg", ["pv"], ["npv"]),
        helper.make_node("Pad", ["x", "pads", "npv"], ["p_value"]),   # a computed value
        helper.make_node("Split", ["x"], ["s0", "s1"], axis=2, num_outputs=2),
        helper.make_node("Split", ["x"], ["u0", "u1", "u2"], axis=1, num_outputs=3),
        helper.make_node("Trilu", ["x", "k"], ["tri"], upper=0),
        helper.make_node("Trilu", ["x", "kk"], ["tri_k"]),          # k a graph input
        helper.make_node("Gather", ["x", "kk"], ["g_k"], axis=1),   # a scalar index
        helper.make_node("Expand", ["b", "eshape"], ["e"]),
        helper.make_node("DepthToSpace", ["d"], ["dcr"], blocksize=2),
        helper.make_node("DepthToSpace", ["d"], ["crd"], blocksize=2, mode="CRD"),
        helper.make_node("Compress", ["x", "cond"], ["cmp"], axis=1),
        helper.make_node("ReverseSequence", ["x", "lens"], ["rev"], batch_axis=0,
                         time_axis=2),
        helper.make_node("OneHot", ["oh_i", "depth", "oh_v"], ["oh"], axis=0),
    ]
    inits = {"st": np.array([-1, 0], np.int64), "en": np.array([-100, 3], np.int64),
             "ax": np.array([-1, 1], np.int64), "sp": np.array([-2, 2], np.int64),
             "pads": np.array([0, 2, 3, 1, 2, 3], np.int64),
             "pads_big": np.array([1, 4, 0, 2, 0, 9], np.int64),
             "pads_ax": np.array([1, 2], np.int64), "axes": np.array([-2], np.int64),
             "k": np.array(1, np.int64), "eshape": np.array([2, 1, 1, 1], np.int64),
             "cond": np.array([1, 0, 1], np.bool_), "lens": np.array([3, 1], np.int64),
             "oh_i": np.array([[1, -1], [5, 0]], np.int64), "depth": np.array(3, np.int64),
             "oh_v": np.array([-1, 2], np.int32)}
    check(nodes, inputs, ["t", "c", "s", "p_reflect", "p_edge", "p_wrap", "p_i8", "p_value", "s0",
                          "s1", "u0", "u1", "u2", "tri", "tri_k", "g_k", "e", "dcr", "crd", "cmp", "rev",
                          "oh"], inits)


def test_data_dependent_shapes_need_static_inputs():
    x = {"x": np.ones((2, 3), np.float32)}
    msg = refusal([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("NonZero", ["r"], ["y"])], x, ["y"])
    assert "NonZero" in msg and "depends" in msg
    msg = refusal([helper.make_node("Relu", ["x"], ["r"]),
                   helper.make_node("Unique", ["r"], ["y"])], x, ["y"])
    assert "Unique" in msg and "depends" in msg


def test_a_computed_slice_bound_is_refused_saying_why():
    x = {"x": np.ones((2, 3), np.float32), "s": np.array([1], np.int64)}
    msg = refusal([helper.make_node("Neg", ["s"], ["ns"]),
                   helper.make_node("Slice", ["x", "ns", "e"], ["y"])], x, ["y"],
                  {"e": np.array([3], np.int64)})
    assert "Slice" in msg and "output shape" in msg and "--const s=" in msg


def test_static_unique_nonzero_range_are_computed_at_import():
    v = np.array([2, 1, 1, 3, 4, 3], np.int64)
    nodes = [helper.make_node("Unique", ["v"], ["y", "idx", "inv", "cnt"], sorted=0),
             helper.make_node("NonZero", ["v"], ["nz"]),
             helper.make_node("Range", ["a", "b", "c"], ["r"])]
    model = _model(nodes, {}, ["y", "idx", "inv", "cnt", "nz", "r"],
                   {"v": v, "a": np.array(5, np.int32), "b": np.array(-2, np.int32),
                    "c": np.array(-3, np.int32)})
    want = ReferenceEvaluator(model).run(None, {})
    text, params = convert_model(model, "net")
    assert len(params) == 6 and "op " not in text.split("graph")[0].replace("op copy", "")
    for p, w in zip(params.values(), want):
        np.testing.assert_array_equal(p.reshape(w.shape), w)
