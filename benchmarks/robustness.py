"""The robustness figures of issue 9, in one run: every column should read 0.

    python benchmarks/robustness.py [--mutants 2000] [--schedules 200] [--steps 200] [--seed 0]

1. mutated programs through the checker: escapes (an exception that is not a TdslError);
2. mutants that check, built for C and called: crashes (the child process died) and
   disagreements with the reference (values, or one raising where the other answers);
3. random legal schedules of std ops (tdsl.testing's adversarial generator): mismatches,
   and builds that fail (gcc refusing the C, or taking over its time limit);
4. random (often illegal) schedule steps: accepted and wrong;
5. bad calls: silently wrong (a kernel or the reference answering instead of a CallError);
6. the per-call region check's cost: a small kernel's call time with and without it.

Mutants and their builds run in forked children, so a crash is counted, not fatal.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import re
import time

import numpy as np

import tdsl
import tdsl.testing as tt
from tdsl.arrays import random_arguments
from tdsl.emit_c import build_kernel
from tdsl.errors import BuildError, TdslError
from tdsl.frontend import unparse
from tdsl.lowering.lower import lower

SIMPLE_OPS = ["matmul", "dense", "conv2d", "depthwise_conv2d", "max_pool2d", "avg_pool2d",
              "softmax", "layer_norm", "batch_norm", "transpose", "concat", "pad2d",
              "reduce_sum", "bias_add", "global_avg_pool2d", "batch_matmul"]
ATTRS = {"max_pool2d": {"kernel": 2}, "avg_pool2d": {"kernel": 2}, "pad2d": {"pad": 1}}


# ---------------------------------------------------------------------------- mutants

def mutate(text: str, rng: random.Random) -> str:
    """One small edit of an op's source: an index, a constant, an operator or a name."""
    tokens = re.findall(r"->|[A-Za-z_]\w*|\d+\.\d+(?:e-?\d+)?|\d+|//|[-+*/%<>=!]=?|\S", text)
    k = rng.randrange(len(tokens))
    t = tokens[k]
    names = [x for x in tokens if re.fullmatch(r"[a-z]\w*", x)]
    if t.isdigit():
        tokens[k] = str(max(0, int(t) + rng.choice([-1, 1])))
    elif t in "+-*/" or t == "//":
        tokens[k] = rng.choice(["+", "-", "*", "//"])
    elif re.fullmatch(r"[A-Za-z_]\w*", t) and names:
        tokens[k] = rng.choice(names + [t + " + 1", t + " - 1"])
    else:
        del tokens[k]
    return " ".join(tokens)


def _mutant_child(text: str, name: str, conn) -> None:
    """In a child: check, then build, call and compare; send one word back."""
    try:
        try:
            module = tdsl.loads(text)
        except TdslError:
            return conn.send("refused")
        if name not in module:
            return conn.send("refused")      # the mutation renamed the op
        op = module[name]
        attrs = ATTRS.get(name, {})
        if any(a.default is None and a.name not in attrs for a in op.ast.attrs):
            return conn.send("refused")
        try:
            args = random_arguments(op, {}, attrs, seed=1, rank=2)
        except TdslError:
            return conn.send("refused")
        try:
            want = op.reference(*args, **attrs)
        except TdslError:
            want = None
        try:
            got = op.build(**attrs)(*args)
        except TdslError:
            got = None
        if (want is None) != (got is None):
            return conn.send("disagrees")
        if want is not None:
            want = want if isinstance(want, tuple) else (want,)
            got = got if isinstance(got, tuple) else (got,)
            for g, w in zip(got, want):
                if g.shape != w.shape or not np.allclose(g, w, rtol=1e-3, atol=1e-3,
                                                         equal_nan=True):
                    return conn.send("disagrees")
        conn.send("agrees")
    except BaseException as e:          # an escape: not a TdslError
        conn.send(f"escape {type(e).__name__}: {e}")


def mutants(count: int, seed: int) -> dict:
    rng = random.Random(seed)
    std = tdsl.stdlib
    sources = {n: unparse.item(std[n].ast) for n in SIMPLE_OPS if n in std}
    tally = {"checked": 0, "escapes": 0, "built": 0, "crashes": 0, "disagree": 0}
    ctx = mp.get_context("fork")
    for _ in range(count):
        name = rng.choice(sorted(sources))
        text = mutate(sources[name], rng)
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_mutant_child, args=(text, name, child))
        p.start()
        child.close()
        p.join(120)
        if p.is_alive():
            p.kill()
        word = parent.recv() if parent.poll() else None
        tally["checked"] += 1
        if word is None:
            tally["crashes"] += 1
        elif word.startswith("escape"):
            tally["escapes"] += 1
            print("   ", word[:200], "in", name)
        elif word != "refused":
            tally["built"] += 1
            tally["disagree"] += word == "disagrees"
    return tally


# ---------------------------------------------------------------------------- schedules

def schedules(count: int) -> dict:
    from hypothesis import HealthCheck, given, settings
    tally = {"schedules": 0, "mismatches": 0, "build_failures": 0}
    per_op = max(1, count // 6)
    for name in ["softmax", "layer_norm", "depthwise_conv2d", "matmul", "conv2d",
                 "max_pool2d"]:
        op, attrs = tdsl.stdlib[name], ATTRS.get(name, {})

        @settings(max_examples=per_op, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(tt.cases(op, attrs, max_size=6))
        def prop(case):
            try:
                tt.check_case(op, case, attrs)
            except AssertionError as e:
                tally["mismatches"] += 1
                print(f"    {name} {case.sizes} {case.steps}: {str(e)[:120]}")
            except BuildError as e:     # a legal schedule gcc cannot compile (in time)
                tally["build_failures"] += 1
                print(f"    {name} {case.sizes} {case.steps}: {str(e)[:120]}")
            tally["schedules"] += 1
        prop()
    return tally


def illegal_steps(count: int, seed: int) -> dict:
    """Random steps on random stages and axes, legal or not: refused, or right."""
    rng = random.Random(seed)
    tally = {"steps": 0, "refused": 0, "accepted_wrong": 0}
    verbs = ["split", "fuse", "reorder", "compute_at", "compute_inline", "vectorize",
             "unroll", "parallel", "cache_read", "cache_write", "storage_align"]
    for _ in range(count):
        name = rng.choice(["softmax", "layer_norm", "matmul", "conv2d"])
        op = tdsl.stdlib[name]
        s = op.schedule("naive")
        stages = [t.name for t in s.fn.stages()] + [t.name for t in s.fn.inputs] + ["Q"]
        axes = ["n", "d", "i", "j", "k", "c", "y", "x", "l", "Q", "n.o", "d.i"]
        stage, axis, other = rng.choice(stages), rng.choice(axes), rng.choice(axes)
        verb = rng.choice(verbs)
        try:
            s = {"split": lambda: s.split(stage, axis, rng.choice([-1, 0, 1, 3])),
                 "fuse": lambda: s.fuse(stage, axis, other),
                 "reorder": lambda: s.reorder(stage, axis, other),
                 "compute_at": lambda: s.compute_at(stage, rng.choice(stages), axis),
                 "compute_inline": lambda: s.compute_inline(stage),
                 "vectorize": lambda: s.vectorize(stage, axis),
                 "unroll": lambda: s.unroll(stage, axis),
                 "parallel": lambda: s.parallel(stage, axis),
                 "cache_read": lambda: s.cache_read(stage, rng.choice(["local", "x"]),
                                                    [rng.choice(stages)]),
                 "cache_write": lambda: s.cache_write(stage, "local"),
                 "storage_align": lambda: s.storage_align(stage, axis, 4, 1)}[verb]()
            func = lower(s.fn, s)
        except TdslError:
            tally["steps"] += 1
            tally["refused"] += 1
            continue
        tally["steps"] += 1
        args = random_arguments(op, {}, {}, seed=2)
        want = op.reference(*args)
        got = build_kernel(func)(*args)
        if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
            tally["accepted_wrong"] += 1
            print(f"    {name}: {verb}({stage}, {axis}) accepted and wrong")
    return tally


# ---------------------------------------------------------------------------- bad calls

def bad_calls() -> dict:
    m = tdsl.loads("""
op add(X: f32[N], Z: f32[M]) -> Y: f32[N] { Y[i] = X[i] + Z[i] }
op gather(X: f32[N], I: i32[K]) -> Y: f32[K] { Y[i] = X[I[i]] }
op to_int(B: bool[N]) -> Y: i32[N] { Y[i] = i32(B[i]) }
""")
    std = tdsl.stdlib
    f = np.float32
    cases = [
        (m["add"], (np.ones(8, f), np.ones(4, f)), {}),
        (m["add"], (np.ones(8, np.float64), np.ones(8, f)), {}),
        (m["add"], (np.ones((8, 1), f), np.ones(8, f)), {}),
        (m["add"], ([1.0] * 8, np.ones(8, f)), {}),
        (m["add"], (np.ones(8, f),), {}),
        (m["gather"], (np.ones(8, f), np.array([0, 8], np.int32)), {}),
        (m["gather"], (np.ones(8, f), np.array([-1], np.int32)), {}),
        (m["to_int"], (np.array([0, 2, 255], np.uint8).view(bool),), {}),
        (std["max_pool2d"], (np.ones((1, 1, 4, 4), f),), {"kernel": 2, "stride": 0}),
        (std["max_pool2d"], (np.ones((1, 1, 1, 4), f),), {"kernel": 2}),
        (std["conv2d"], (np.ones((1, 2, 5, 5), f), np.ones((3, 2, 3, 3), f)), {"stride": 0}),
        (std["matmul"], (np.ones((2, 3), f), np.ones((4, 5), f)), {}),
        (std["conv2d"], (np.ones((1, 2, 2, 2), f), np.ones((3, 2, 3, 3), f)), {}),
    ]
    tally = {"calls": 0, "silently_wrong": 0}
    for op, args, attrs in cases:
        for label, call in (("reference", lambda: op.reference(*args, **attrs)),
                            ("kernel", lambda: op.build(**attrs)(*args))):
            tally["calls"] += 1
            try:
                out = call()
            except TdslError:
                continue
            # an answer: right only where it is what the call means (bools: truth)
            if op.name == "to_int" and np.array_equal(out, [0, 1, 1]):
                continue
            tally["silently_wrong"] += 1
            print(f"    {label} {op.name}{[getattr(a, 'shape', a) for a in args]} {attrs}: "
                  f"answered")
    return tally


def region_check_cost(repeats: int = 2000, rounds: int = 7) -> tuple[float, float]:
    """Microseconds per call of a small serial kernel, with the region check and without it
    (the best of ``rounds`` interleaved rounds: the machine may be busy)."""
    import dataclasses
    op = tdsl.loads("op add(X: f32[N], Z: f32[M]) -> Y: f32[N] { Y[i] = X[i] + Z[i] }")["add"]
    func = op.lower(schedule="naive")
    bare = dataclasses.replace(func, attrs={**func.attrs, "reads": (), "stage_shapes": ()})
    x = np.ones(64, np.float32)
    kernels = [build_kernel(f) for f in (func, bare)]
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for k, kernel in enumerate(kernels):
            kernel(x, x)
            t0 = time.perf_counter()
            for _ in range(repeats):
                kernel(x, x)
            best[k] = min(best[k], (time.perf_counter() - t0) / repeats * 1e6)
    return best[0], best[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mutants", type=int, default=200)
    p.add_argument("--schedules", type=int, default=60)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    t0 = time.time()
    mt = mutants(a.mutants, a.seed)
    print(f"mutated programs through the checker: {mt['checked']}, escapes {mt['escapes']}")
    print(f"mutants that check, built and called: {mt['built']}, crashes {mt['crashes']}, "
          f"disagreements with the reference {mt['disagree']}")
    sc = schedules(a.schedules)
    print(f"random legal schedules: {sc['schedules']}, mismatches {sc['mismatches']}, "
          f"failed builds {sc['build_failures']}")
    il = illegal_steps(a.steps, a.seed)
    print(f"random schedule steps: {il['steps']}, refused {il['refused']}, accepted and "
          f"wrong {il['accepted_wrong']}")
    bc = bad_calls()
    print(f"bad calls: {bc['calls']}, silently wrong {bc['silently_wrong']}")
    with_check, without = region_check_cost()
    print(f"per-call cost of the region check: {with_check:.2f} us per call with it, "
          f"{without:.2f} us without (checked once per shape)")
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
