"""ONNX's operator conformance cases (the node tests the onnx wheel generates), run through
tdsl: import, build for the C backend, call, compare with the recorded outputs.

The wheel ships the cases' generators, not their data: `cases()` runs them once and keeps
the result in a cache file (~/.cache/tdsl, keyed by the onnx version). `run_case` gives one
case's outcome; `python tests/onnx_cases.py [OP|CASE ...]` runs them (all by default) in
worker processes (a kernel that crashes takes only its worker down) and prints the counts by
outcome; ``--write-expected`` rewrites tests/onnx_expected_refusals.txt from the run.

Outcomes:
- ``pass``: every output matches (dtype, shape, values within the case's tolerances);
- ``refused``: a `TdslError` at import, check or build: the clear refusal the suite allows;
- ``wrong``: a result that differs (the worst kind of bug);
- ``error``: any other exception (a raw traceback: a bug);
- ``crash``: the worker process died.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "onnx_expected_refusals.txt"


@dataclass(frozen=True)
class Case:
    name: str
    op: str                      # the operator it tests (its model's first node type)
    model: bytes                 # the serialized ModelProto
    inputs: list
    outputs: list
    rtol: float
    atol: float


def _cache_file() -> Path:
    import onnx
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tdsl"
    return root / f"onnx-node-cases-{onnx.__version__}.pkl"


def cases() -> list[Case]:
    """Every generated node case with data, from the cache or generated now."""
    path = _cache_file()
    if path.exists():
        try:
            return pickle.loads(path.read_bytes())
        except Exception:                    # a stale or torn cache is regenerated
            pass
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        found = collect_testcases()
    from onnx import numpy_helper

    def array(v):
        return numpy_helper.to_array(v) if hasattr(v, "SerializeToString") else v

    found = [c for c in found if c.kind == "node" and c.data_sets]
    single = {c.name: c.model.graph.node[0].op_type for c in found
              if len(c.model.graph.node) == 1}
    out = []
    for c in found:
        ins, outs = c.data_sets[0]
        # an "_expanded" case is its operator as the function body ONNX defines: it counts
        # for the operator of the case it expands
        base = c.name.split("_expanded")[0]
        op = single.get(base) or single.get(c.name) or c.model.graph.node[0].op_type
        out.append(Case(c.name, op, c.model.SerializeToString(), [array(v) for v in ins],
                        [array(v) for v in outs], float(c.rtol), float(c.atol)))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(pickle.dumps(out))
    os.replace(tmp, path)                    # atomic: a concurrent reader sees all or nothing
    return out


def expected_refusals() -> dict[str, str]:
    """The expected-refusal list: case name -> the reason given."""
    out = {}
    for line in EXPECTED.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, why = line.partition(" ")
            out[name] = why.strip().lstrip("#").strip()
    return out


def _compare(got, want, rtol, atol) -> str | None:
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind in "US" or want.dtype == object:
        return f"a {want.dtype} output"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype.isbuiltin == 2:        # ml_dtypes' bf16 and 8- and 4-bit floats
        got, want = got.astype(np.float32), want.astype(np.float32)
    if want.dtype.kind == "f":
        bad = ~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        bad = got != want
    if bad.any():
        k = int(np.argmax(bad.reshape(-1)))
        return (f"{int(bad.sum())} of {bad.size} values differ; first at flat index {k}: "
                f"{got.reshape(-1)[k]!r}, expected {want.reshape(-1)[k]!r}")
    return None


# cases whose recorded outputs carry float32 rounding beyond their own tolerance: the exact
# answer (float64 numpy.fft too) misses test_dft_inverse's zeros by 1.9e-7 at atol 1e-7
TOLERANCES = {"test_dft_inverse": (1e-5, 1e-6), "test_dft_inverse_opset19": (1e-5, 1e-6)}
# the bf16 Attention cases' outputs round every step to bf16 and sit 0.66-0.95% (relative)
# from the exact answer (the same model in float64); tdsl computes in f32 and rounds once,
# so it differs from them by up to 2 bf16 steps (2**-7) rather than their rtol of 1e-3
TOLERANCES.update({f"test_attention_{c}_bf16": (2 ** -6, 1e-3) for c in (
    "3d_causal", "4d_attn_mask_causal", "4d_causal", "4d_causal_padded_kv", "4d_padded_kv")})


def run_case(case: Case, target: str = "c") -> tuple[str, str]:
    """(outcome, detail) of one case (see the module's docstring)."""
    import onnx

    import tdsl
    from tdsl.errors import TdslError
    from tdsl.onnx_import import NeedsConstant, convert_model
    model = onnx.load_from_string(case.model)
    names = [i.name for i in model.graph.input
             if i.name not in {init.name for init in model.graph.initializer}]
    given = dict(zip(names, case.inputs))
    constants = {}
    try:
        while True:
            try:
                text, params = convert_model(model, "net", case.name, constants)
                break
            except NeedsConstant as e:      # an input that gives a shape, axes, pads ...
                if e.input_name in constants or e.input_name not in given:
                    raise
                constants[e.input_name] = given[e.input_name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = tdsl.loads(text)["net"]
            module = graph.build(target, params=params)
            args = [given[n] for n in names if n not in constants]
            got = module(*args)
    except TdslError as e:
        return "refused", str(e).splitlines()[0][:300]
    except Exception as e:                  # a raw exception is a bug, reported as such
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    got = got if isinstance(got, (tuple, list)) else [got]
    if len(got) != len(case.outputs):
        return "wrong", f"{len(got)} outputs, expected {len(case.outputs)}"
    for k, (g, w) in enumerate(zip(got, case.outputs)):
        why = _compare(g, w, *TOLERANCES.get(case.name, (case.rtol, case.atol)))
        if why:
            return "wrong", f"output {k}: {why}"
    return "pass", ""


# ---------------------------------------------------------------------------- all of them

def _worker(names: list[str], out_path: str) -> None:
    by_name = {c.name: c for c in cases()}
    with open(out_path, "a") as out:
        for n in names:
            out.write(json.dumps({"start": n}) + "\n")
            out.flush()
            status, detail = run_case(by_name[n])
            out.write(json.dumps({"name": n, "status": status, "detail": detail}) + "\n")
            out.flush()


def run_all(names: list[str], workers: int = 2, log_dir: Path | None = None
            ) -> dict[str, tuple[str, str]]:
    """Outcomes of the named cases, run in ``workers`` processes; a worker that dies has
    its case recorded as a crash and the rest of its share run by a new worker."""
    import tempfile
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="tdsl-onnx-"))
    results: dict[str, tuple[str, str]] = {}
    shares = [names[k::workers] for k in range(workers)]
    pending = []
    for k, share in enumerate(shares):
        if share:
            pending.append((share, log_dir / f"worker{k}.jsonl"))
    while pending:
        procs = [(subprocess.Popen([sys.executable, __file__, "--worker", str(path)],
                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, text=True), share, path)
                 for share, path in pending]
        for p, share, _ in procs:
            p.stdin.write("\n".join(share))
            p.stdin.close()
        pending = []
        for p, share, path in procs:
            p.wait()
            started = None
            for line in path.read_text().splitlines():
                rec = json.loads(line)
                if "start" in rec:
                    started = rec["start"]
                else:
                    results[rec["name"]] = (rec["status"], rec["detail"])
                    started = None
            if started is not None and started not in results:
                results[started] = ("crash", f"the worker died (exit {p.returncode})")
            rest = [n for n in share if n not in results]
            if rest:
                pending.append((rest, path))
    return results


DOC = HERE.parent / "docs" / "onnx.md"
BEGIN, END = "<!-- conformance: begin -->", "<!-- conformance: end -->"


def write_doc(all_cases, results) -> None:
    """docs/onnx.md's generated part: the counts, and each operator with a converter with
    its cases passing."""
    import onnx

    from tdsl.onnx_import import CONVERTERS, FAMILY
    totals = Counter(results[c.name][0] for c in all_cases)
    by_op = defaultdict(Counter)
    for c in all_cases:
        by_op[c.op][results[c.name][0]] += 1
    passing = sorted(op for op, n in by_op.items() if n["pass"])
    dtypes = Counter()
    for c in all_cases:
        for a in c.inputs:
            if isinstance(a, np.ndarray):
                dtypes[(str(a.dtype), results[c.name][0] == "pass")] += 1
    lines = [BEGIN, "",
             f"With onnx {onnx.__version__}: **{totals['pass']} of {len(all_cases)}** generated "
             f"node cases pass ({totals['pass'] / len(all_cases):.1%}); {totals['refused']} "
             f"are refused with a clear error, {totals['wrong']} give a wrong answer, "
             f"{totals['error'] + totals['crash']} fail otherwise. "
             f"**{len(passing)} of {len(by_op)}** operators have a passing case. "
             "Regenerate with `python tests/onnx_cases.py --doc`.", "",
             "| operator | family | cases passing |", "|---|---|---|"]
    for op in sorted(set(CONVERTERS) | set(passing)):
        n = by_op.get(op, Counter())
        total = sum(n.values())
        cell = f"{n['pass']} of {total}" if total else "no case"
        lines.append(f"| {op} | {FAMILY.get(op, '')} | {cell} |")
    lines += ["", "Input arrays of the cases by dtype (passing / all):", "",
              "| dtype | passing | all |", "|---|---|---|"]
    for dt in sorted({d for d, _ in dtypes}):
        lines.append(f"| {dt} | {dtypes[(dt, True)]} | {dtypes[(dt, True)] + dtypes[(dt, False)]} |")
    lines += ["", END]
    text = DOC.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    DOC.write_text(head + "\n".join(lines) + tail)
    print(f"wrote the conformance table of {DOC}")


def main(argv) -> int:
    if argv[:1] == ["--worker"]:
        _worker(sys.stdin.read().split(), argv[1])
        return 0
    import time
    write = "--write-expected" in argv
    doc = "--doc" in argv
    argv = [a for a in argv if a not in ("--write-expected", "--doc")]
    only = set(argv)
    all_cases = [c for c in cases() if not only or c.name in only or c.op in only]
    t = time.time()
    results = run_all([c.name for c in all_cases])
    ops = defaultdict(Counter)
    for c in all_cases:
        ops[c.op][results[c.name][0]] += 1
    totals = Counter(s for s, _ in results.values())
    if "--details" in os.environ.get("TDSL_ONNX_CASES", ""):
        for c in all_cases:
            print(f"{results[c.name][0]:8} {c.name}: {results[c.name][1]}")
    for c in all_cases:
        s, d = results[c.name]
        if s in ("wrong", "error", "crash"):
            print(f"{s:8} {c.name}: {d}")
    passing_ops = sum(1 for o in ops.values() if o["pass"])
    print(f"\n{len(all_cases)} cases in {time.time() - t:.0f} s: " +
          ", ".join(f"{totals[k]} {k}" for k in ("pass", "refused", "wrong", "error", "crash")))
    print(f"pass rate {totals['pass'] / max(len(all_cases), 1):.1%}; operators with a passing "
          f"case: {passing_ops} of {len(ops)}")
    if write:
        # the list is rewritten from this run: refused cases with their reasons (cases not
        # run keep their lines); wrong answers, errors and crashes are never listed
        keep = {n: why for n, why in expected_refusals().items() if n not in results}
        keep.update({n: d for n, (s, d) in results.items() if s == "refused"})
        head = [line for line in EXPECTED.read_text().splitlines() if line.startswith("#")]
        EXPECTED.write_text("\n".join(head + [f"{n}  # {keep[n]}" for n in sorted(keep)])
                            + "\n")
        print(f"wrote {len(keep)} expected refusals to {EXPECTED}")
    if doc:
        write_doc(all_cases, results)
    out = Path(os.environ.get("TDSL_ONNX_RESULTS", "/tmp/tdsl-onnx-results.json"))
    out.write_text(json.dumps(results, indent=0))
    print(f"outcomes of every case: {out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    raise SystemExit(main(sys.argv[1:]))
