"""Converters of the control-flow operators: If, Loop, Scan; and the inlining of an operator's
ONNX function body (`inline_function`), which other families use for operators ONNX defines
as a function of others.

A subgraph (a branch, a loop body) is converted node by node in the converter of the outer
graph, its values renamed (a prefix per expansion), so that what it computes is part of the
one tdsl graph. Names it reads from enclosing scopes resolve through the renaming of every
enclosing subgraph being converted (``cv._onnx_scope``).

- If: a condition known at import inlines the branch taken; one computed at run time
  computes both branches and selects each output (a Where), when the two branches give
  outputs of the same shape and dtype (else it is refused).
- Loop: the trip count and the condition must be known at import (a graph input giving one
  is asked for as a constant); the body is unrolled, its condition output known at each
  iteration. Scan outputs are stacked along a new first axis.
- Scan (opset 8 with its batch axis and without sequence_lens, and 9+ with scan_input_axes,
  scan_input_directions, scan_output_axes, scan_output_directions): unrolled over the scan
  axis, each step reading a slice of every scan input.

Unrolling emits calls, not ops: every iteration calls the same ops (their texts are written
once), so a loop of T steps costs T times the body's calls; at most `MAX_UNROLL` steps.
"""
from __future__ import annotations

import numpy as np

from . import templates as T
from ..errors import TdslError
from .convert import NeedsConstant
from .registry import ATTRIBUTES, CONVERTERS, converter, opt
from .tensor import _input_source

MAX_UNROLL = 4096           # the most iterations of a Loop or steps of a Scan unrolled


# ---------------------------------------------------------------------------- subgraphs

def _uid(cv) -> int:
    k = cv.__dict__.get("_onnx_uid", 0)
    cv._onnx_uid = k + 1
    return k


def convert_node(cv, node) -> None:
    """Convert one node as `convert_model` converts those of the main graph."""
    import onnx
    cv.node = node
    if node.domain not in ("", "ai.onnx"):
        raise cv.error(f"operators of domain '{node.domain}' are not supported")
    if node.op_type not in CONVERTERS:
        raise cv.error("this operator is not supported (docs/onnx.md lists those that are)")
    attrs = {at.name: onnx.helper.get_attribute_value(at) for at in node.attribute}
    unknown = sorted(set(attrs) - ATTRIBUTES[node.op_type])
    if unknown:
        raise cv.error(f"attribute '{unknown[0]}' is not supported")
    CONVERTERS[node.op_type](cv, node, attrs)


def _ask_constant(cv, node, e) -> None:
    """A subgraph's node that needs a value known at import, computed from a graph input:
    a `NeedsConstant` for that input (the main graph's converters trace only its nodes)."""
    if isinstance(e, NeedsConstant) or "import time" not in str(e):
        return
    for i in node.input:
        v = _input_source(cv, i) if i else None
        if v is not None:
            raise NeedsConstant(f"{e.message}; it is computed from the graph input '{v}': "
                                f"give its value with --const {v}=FILE.npy", v) from None


def _derived(cv, outs, srcs) -> None:
    """Record that the values ``outs`` (of a control-flow node) are computed from ``srcs``
    (what its subgraphs computed), for `_ask_constant`'s walk back to graph inputs."""
    import onnx
    for o in outs:
        if o:
            n = onnx.NodeProto()
            n.op_type = "Identity"
            n.input.extend(s for s in srcs if s)
            n.output.append(o)
            cv.subgraph_producers[o] = n


def run_graph(cv, graph, inputs: dict, what: str) -> list[str]:
    """Convert the nodes of subgraph ``graph``, its inputs bound to the values ``inputs``
    (subgraph input name -> converter value name); the names of its outputs' values."""
    import onnx
    from onnx import numpy_helper
    outer_node, outer_count = cv.node, cv.count
    outer_scope = cv.__dict__.get("_onnx_scope", {})
    prefix = f"{what}#{_uid(cv)}/"
    env = dict(outer_scope)
    env.update(inputs)
    for init in graph.initializer:
        env[init.name] = prefix + init.name
        cv.static[prefix + init.name] = numpy_helper.to_array(init)
    if len(graph.sparse_initializer):
        raise cv.error(f"{what}: a subgraph with sparse initializers")
    try:
        for sub in graph.node:
            n2 = onnx.NodeProto()
            n2.CopyFrom(sub)
            del n2.input[:]
            n2.input.extend(env.get(i, i) if i else "" for i in sub.input)
            del n2.output[:]
            for o in sub.output:
                if o:
                    env[o] = prefix + o
            n2.output.extend(env[o] if o else "" for o in sub.output)
            cv._onnx_scope = env            # what a nested subgraph reads from this one
            for o in n2.output:
                cv.subgraph_producers[o] = n2
            try:
                convert_node(cv, n2)
            except TdslError as e:
                _ask_constant(cv, n2, e)
                raise
    finally:
        cv._onnx_scope = outer_scope
        cv.node, cv.count = outer_node, outer_count
    outs = []
    for o in graph.output:
        name = env.get(o.name, o.name)
        if name not in cv.static and name not in cv.tensors:
            raise cv.error(f"{what}: output '{o.name}' is computed by no node")
        outs.append(name)
    return outs


def inline_function(cv, node, attrs=None) -> None:
    """Convert ``node`` as the nodes of the function body ONNX defines for its operator
    (for the model's opset, for the node's attributes and input types)."""
    import onnx
    from onnx import helper
    try:
        from onnx.backend.test.case.node import function_testcase_helper
    except ImportError:                                    # pragma: no cover
        raise cv.error("this operator needs onnx's function bodies (onnx.backend)") \
            from None
    from ..lowering.dtypes import to_numpy
    types = []
    for name in node.input:
        if not name:
            types.append(onnx.TypeProto())
            continue
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(to_numpy(cv.dtype(name))))
        types.append(helper.make_tensor_type_proto(elem, list(cv.shape(name))))
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    try:
        expanded, _ = function_testcase_helper(
            copy, types, f"n{_uid(cv)}", [helper.make_opsetid("", cv.opset)])
    except Exception as e:                 # onnx's own errors for a node it can't expand
        raise cv.error(f"its ONNX function body can't be built: "
                       f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if not expanded:
        raise cv.error("this operator has no ONNX function body to convert")
    def version(entry):
        return next((o.version for o in entry[1] if o.domain in ("", "ai.onnx")), 0)
    # the body written for the newest opset the model's covers (its nodes are converted
    # with the model's opset)
    fits = [e for e in expanded if version(e) <= cv.opset]
    nodes, _ = max(fits, key=version) if fits else min(expanded, key=version)
    outer_node, outer_count = cv.node, cv.count
    outer_scope = cv.__dict__.get("_onnx_scope", {})
    try:
        for sub in nodes:
            for o in sub.output:
                if o:
                    cv.subgraph_producers[o] = sub
            try:
                convert_node(cv, sub)
            except NeedsConstant:
                raise
            except TdslError as e:           # named as the node of the model
                _ask_constant(cv, sub, e)
                cv.node, cv.count = outer_node, outer_count
                raise cv.error(f"in its ONNX function body: {e.message}") \
                    from None
    finally:
        cv._onnx_scope = outer_scope
        cv.node, cv.count = outer_node, outer_count
    for o in node.output:
        if o and o not in cv.static and o not in cv.tensors:
            raise cv.error(f"output '{o}' is computed by no node of its function body")


# ---------------------------------------------------------------------------- helpers

def _take(cv, out: str, src: str, axis: int, k: int) -> None:
    """``out = src`` at index ``k`` of ``axis``, that axis removed."""
    if src in cv.static:
        cv.static[out] = np.take(cv.static[src], k, axis=axis)
        return
    x = cv.tensor(src)
    shape = list(x.shape)
    out_shape = shape[:axis] + shape[axis + 1:]
    i = T.idx(len(out_shape))
    subs = i[:axis] + ["t"] + i[axis:]
    text = (f"op {{name}}(X: {T.ty(shape, x.dtype)}; t: int) -> "
            f"Y: {T.ty(out_shape, x.dtype)} {{\n"
            f"    {T.at('Y', i)} = {T.at('X', subs)}\n}}\n")
    cv.call(out, cv.op("take", text), [x], out_shape, f"t={k}", dtype=x.dtype)


def _stack(cv, out: str, names: list[str], axis: int) -> None:
    """``out``: the values ``names`` (of one shape and dtype) stacked along a new ``axis``."""
    shapes = {tuple(cv.shape(n)) for n in names}
    dtypes = {cv.dtype(n) for n in names}
    if len(shapes) != 1 or len(dtypes) != 1:
        raise cv.error("scan outputs of different shapes or dtypes across iterations")
    shape, dtype = list(shapes.pop()), dtypes.pop()
    out_shape = shape[:axis] + [len(names)] + shape[axis:]
    if all(n in cv.static for n in names):
        cv.static[out] = np.stack([cv.static[n] for n in names], axis=axis)
        return
    if len(names) == 1:
        cv.reshape(out, names[0], out_shape)
        return
    ts = [cv.tensor(n) for n in names]
    i = T.idx(len(out_shape))
    rest = i[:axis] + i[axis + 1:]
    expr = T.at(f"A{len(ts) - 1}", rest)
    for k in reversed(range(len(ts) - 1)):
        expr = f"select({i[axis]} == {k}, {T.at(f'A{k}', rest)}, {expr})"
    params = ", ".join(f"A{k}: {T.ty(shape, dtype)}" for k in range(len(ts)))
    text = (f"op {{name}}({params}) -> Y: {T.ty(out_shape, dtype)} {{\n"
            f"    {T.at('Y', i)} = {expr}\n}}\n")
    cv.call(out, cv.op("stack", text), ts, out_shape, dtype=dtype)


def _truth(cv, name: str, what: str) -> bool:
    v = cv.value(name) if name not in cv.static else cv.static[name]
    v = np.asarray(v)
    if v.size != 1:
        raise cv.error(f"{what} has {v.size} elements (it is a single bool)")
    return bool(v.reshape(()))


# ---------------------------------------------------------------------------- If

@converter("If", attrs=("then_branch", "else_branch"))
def if_(cv, node, a):
    cond = node.input[0]
    if cv.is_static(cond):
        branch = a["then_branch"] if _truth(cv, cond, "the condition") else a["else_branch"]
        outs = run_graph(cv, branch, {}, "if")
        if len(outs) < len([o for o in node.output if o]):
            raise cv.error("the branch taken has fewer outputs than the If")
        for o, src in zip(node.output, outs):
            if o:
                cv.alias(o, src)
                _derived(cv, [o], [src])
        return
    # a condition computed at run time: both branches, each output selected
    c = cv.tensor(cond)
    if c.dtype != "bool" or int(np.prod(c.shape)) != 1:
        raise cv.error(f"a condition of type {c.type} (a single bool)")
    then = run_graph(cv, a["then_branch"], {}, "then")
    else_ = run_graph(cv, a["else_branch"], {}, "else")
    scalar = f"{cond}#cond"
    cv.reshape(scalar, cond, ())
    for o, t, e in zip(node.output, then, else_):
        if not o:
            continue
        _derived(cv, [o], [cond, t, e])
        st, se = tuple(cv.shape(t)), tuple(cv.shape(e))
        dt, de = cv.dtype(t), cv.dtype(e)
        if st != se or dt != de:
            raise cv.error(
                f"a condition computed at run time, with branches whose output '{o}' "
                f"differs ({T.ty(st, dt)} and {T.ty(se, de)}): the output's type would "
                f"depend on the data")
        if t in cv.static and e in cv.static and \
                np.array_equal(cv.static[t], cv.static[e]):
            cv.static[o] = cv.static[t]
            continue
        if t in cv.static and e in cv.static and cv.static[t].size != 1:
            cv.tensor(t)                   # both weights: select between two params
        cv.elementwise(o, [scalar, t, e], "select({0}, {1}, {2})", "where", dtype=dt)
        if cv.tensors[o].shape != st:     # a scalar of both static branches, say
            cv.reshape(o + "#shaped", o, st)
            cv.tensors[o] = cv.tensors[o + "#shaped"]


# ---------------------------------------------------------------------------- Loop

@converter("Loop", attrs=("body",))
def loop(cv, node, a):
    body = a["body"]
    m, cond = opt(node, 0), opt(node, 1)
    carried = list(node.input[2:])
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried
    if len(body.input) != n_carried + 2 or n_scan < 0:
        raise cv.error("a body whose inputs and outputs don't match the loop's")
    trips = None
    if m is not None:
        v = np.asarray(cv.value(m))
        trips = int(v.reshape(-1)[0])
    go = _truth(cv, cond, "the loop condition") if cond is not None else True
    if trips is None and cond is None:
        raise cv.error("a loop without a trip count or condition runs forever")
    limit = min(trips, MAX_UNROLL) if trips is not None else MAX_UNROLL
    state = [c for c in carried]
    scans: list[list[str]] = [[] for _ in range(n_scan)]
    k = 0
    base = node.output[0] or node.name or "loop"
    while go and k < limit:
        it = f"{base}#iter{_uid(cv)}"
        cv.static[it] = np.array(k, np.int64)
        cin = f"{base}#cond{_uid(cv)}"
        cv.static[cin] = np.array(True)
        binds = {body.input[0].name: it, body.input[1].name: cin}
        for inp, s in zip(body.input[2:], state):
            binds[inp.name] = s
        outs = run_graph(cv, body, binds, "loop")
        if not cv.is_static(outs[0]):
            raise cv.error("a loop condition computed at run time (the number of "
                           "iterations would depend on the data)")
        go = _truth(cv, outs[0], "the body's condition")
        state = outs[1:1 + n_carried]
        for j, s in enumerate(outs[1 + n_carried:]):
            scans[j].append(s)
        k += 1
    if go and (trips is None or k < trips):
        raise cv.error(f"a loop of more than {MAX_UNROLL} iterations (it is unrolled)")
    _derived(cv, node.output, state + [n for names in scans for n in names])
    for o, s in zip(node.output[:n_carried], state):
        if o:
            cv.alias(o, s)
    for o, names in zip(node.output[n_carried:], scans):
        if not o:
            continue
        if not names:
            raise cv.error("a loop of no iterations with scan outputs (an empty tensor)")
        _stack(cv, o, names, 0)


# ---------------------------------------------------------------------------- Scan

def _scan(cv, node, a, states, scan_ins, outs, what) -> None:
    """Scan-9 semantics: ``states`` and ``scan_ins`` value names; ``outs`` output names
    (the final states, then the scan outputs)."""
    body = a["body"]
    n_st, n_in = len(states), len(scan_ins)
    n_out = len(body.output) - n_st
    if len(body.input) != n_st + n_in or n_out < 0:
        raise cv.error("a body whose inputs and outputs don't match the scan's")
    in_axes = list(a.get("scan_input_axes") or [0] * n_in)
    in_dirs = list(a.get("scan_input_directions") or [0] * n_in)
    out_axes = list(a.get("scan_output_axes") or [0] * n_out)
    out_dirs = list(a.get("scan_output_directions") or [0] * n_out)
    if len(in_axes) != n_in or len(in_dirs) != n_in or len(out_axes) != n_out or \
            len(out_dirs) != n_out:
        raise cv.error("scan axes or directions of the wrong length")
    lengths = set()
    for k, x in enumerate(scan_ins):
        r = len(cv.shape(x))
        if not -r <= in_axes[k] < r:
            raise cv.error(f"scan_input_axes {in_axes[k]} out of range for rank {r}")
        in_axes[k] %= r
        lengths.add(cv.shape(x)[in_axes[k]])
    if len(lengths) != 1:
        raise cv.error(f"scan inputs of different lengths {sorted(lengths)}")
    n = lengths.pop()
    if n == 0:
        raise cv.error("a scan of length 0 (empty outputs)")
    if n > MAX_UNROLL:
        raise cv.error(f"a scan of {n} steps (it is unrolled: at most {MAX_UNROLL})")
    state = list(states)
    per_step: list[list[str]] = [[] for _ in range(n_out)]
    for t in range(n):
        binds = {inp.name: s for inp, s in zip(body.input[:n_st], state)}
        for k, x in enumerate(scan_ins):
            pos = n - 1 - t if in_dirs[k] else t
            sl = f"{what}#in{k}_{_uid(cv)}"
            _take(cv, sl, x, in_axes[k], pos)
            binds[body.input[n_st + k].name] = sl
        res = run_graph(cv, body, binds, what)
        state = res[:n_st]
        for j, s in enumerate(res[n_st:]):
            per_step[j].append(s)
    _derived(cv, outs, state + [n for names in per_step for n in names])
    for o, s in zip(outs[:n_st], state):
        if o:
            cv.alias(o, s)
    for j, (o, names) in enumerate(zip(outs[n_st:], per_step)):
        if not o:
            continue
        r = len(cv.shape(names[0])) + 1
        axis = out_axes[j]
        if not -r <= axis < r:
            raise cv.error(f"scan_output_axes {axis} out of range for rank {r}")
        _stack(cv, o, names[::-1] if out_dirs[j] else names, axis % r)


@converter("Scan", attrs=("body", "num_scan_inputs", "scan_input_axes",
                          "scan_input_directions", "scan_output_axes",
                          "scan_output_directions", "directions"))
def scan(cv, node, a):
    n_in = int(a["num_scan_inputs"])
    if cv.opset >= 9:
        if "directions" in a:
            raise cv.error("attribute 'directions' is Scan-8's (this model is opset 9+)")
        ins = list(node.input)
        n_st = len(ins) - n_in
        _scan(cv, node, a, ins[:n_st], ins[n_st:], list(node.output), "scan")
        return
    # Scan-8: a batch axis 0 first, the scan axis 1, and sequence_lens
    if opt(node, 0) is not None:
        raise cv.error("Scan-8 with sequence_lens (variable lengths per batch)")
    if any(k in a for k in ("scan_input_axes", "scan_output_axes",
                            "scan_input_directions", "scan_output_directions")):
        raise cv.error("Scan-8 has no scan axes attributes")
    ins = list(node.input[1:])
    n_st = len(ins) - n_in
    a9 = {"body": a["body"], "scan_input_directions": a.get("directions")}
    batch = {cv.shape(x)[0] for x in ins if len(cv.shape(x))}
    if len(batch) != 1 or any(not len(cv.shape(x)) for x in ins):
        raise cv.error("Scan-8 inputs without one batch axis")
    nb = batch.pop()
    outs = list(node.output)
    per_batch = [[] for _ in outs]
    for b in range(nb):
        sl = []
        for k, x in enumerate(ins):
            s = f"{x}#b{b}_{_uid(cv)}"
            _take(cv, s, x, 0, b)
            sl.append(s)
        bouts = [f"{o or 'out'}#b{b}_{_uid(cv)}" for o in outs]
        _scan(cv, node, a9, sl[:n_st], sl[n_st:], bouts, "scan")
        for j, o in enumerate(bouts):
            per_batch[j].append(o)
    for o, names in zip(outs, per_batch):
        if o:
            _stack(cv, o, names, 0)
