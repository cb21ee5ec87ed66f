"""Targets: parsed from strings, resolved from the compiler's own ISA macros, read by schedule
blocks, and every std op built for each x86 ISA level this host runs matches its reference."""
import shutil

import numpy as np
import pytest

import tdsl
from tdsl.target import Target, TargetError, compiler_macros
from tdsl.tuner.space import ConfigSpace

HOST = Target()
# the ISA levels this host can run: v2 and v3 on any x86-64 machine of this decade, v4 with
# AVX-512 (the host's own target is "c")
X86_LEVELS = [f"c -march=x86-64-{v}" for v in ("v2", "v3", "v4")
              if HOST.arch == "x86_64" and Target(f"c -march=x86-64-{v}").unrunnable_reason()
              is None]


def test_the_host_target_comes_from_the_compiler():
    macros = compiler_macros("gcc", ("-march=native",))
    expected = 16 if "__AVX512F__" in macros else 8 if "__AVX__" in macros else 4
    if HOST.arch == "x86_64":
        assert HOST.lanes == expected
        assert HOST.registers == (32 if expected == 16 else 16)
    assert HOST.unrunnable_reason() is None
    assert str(HOST) == "c" and Target("c") is HOST and tdsl.as_target(None) is HOST


@pytest.mark.skipif(HOST.arch != "x86_64", reason="x86 ISA levels need an x86-64 host")
def test_isa_levels_set_lanes_and_registers():
    v2, v3, v4 = (Target(f"c -march=x86-64-{v}") for v in ("v2", "v3", "v4"))
    assert (v2.lanes, v2.registers) == (4, 16)
    assert (v3.lanes, v3.registers) == (8, 16)
    assert (v4.lanes, v4.registers) == (16, 32)
    # the preferred vector width is the target's own, never a width it lacks
    assert "-mprefer-vector-width=256" in v3.flags
    assert not any("prefer-vector-width=512" in f for f in v3.flags + v2.flags)
    assert str(v3) == "c -march=x86-64-v3"


def test_options_override_and_are_checked():
    t = Target("c -lanes=4 -registers=8")
    assert (t.lanes, t.registers) == (4, 8)
    for bad in ("", "llvm", "c march=x", "c -foo=1", "c -lanes=0", "c -lanes=x",
                "c -march=x86-64-v3 -march=x86-64-v2", "c -march=no-such-cpu"):
        with pytest.raises(TargetError):
            Target(bad)


def test_tdsl_target_prints_the_host(capsys):
    from tdsl.cli import main
    assert main(["target"]) == 0
    out = capsys.readouterr().out
    assert f"lanes      {HOST.lanes}" in out and "fp32 peak" in out
    assert main(["target", "c -march=nope"]) == 1


def test_the_measured_peak_is_a_positive_rate():
    from tdsl.emit_c.peak import measure_peak_gflops
    assert measure_peak_gflops(HOST, seconds=0.05) > 0.5


def test_schedule_blocks_read_the_target():
    mod = tdsl.loads("""
op scale(X: f32[N]) -> Y: f32[N] { Y[i] = 2.0 * X[i] }
schedule scale for cpu {
    knob v in [lanes, 2 * lanes] = 2 * lanes
    require v <= lanes * registers
    io, ii = split(Y.i, v)
    vectorize(ii)
}
""")
    op = mod["scale"]
    for spec in ["c", *X86_LEVELS]:
        t = Target(spec)
        sched = op.schedule(target=t)
        knob = sched.knobs[0]
        assert knob.choices == (t.lanes, 2 * t.lanes) and knob.default == 2 * t.lanes
        x = np.arange(37, dtype=np.float32)
        np.testing.assert_array_equal(op.build(t)(x), 2 * x)


def test_min_and_max_bound_a_default_by_two_facts_and_a_knob_by_another():
    mod = tdsl.loads("""
op scale(X: f32[N]) -> Y: f32[N] { Y[i] = 2.0 * X[i] }
schedule scale for cpu {
    knob t in [2, 4, 6, 8, 12] = min(registers * 3 // 8, l1 // 4096)
    knob u in [1, 2, 4] = 4
    require max(t, u) <= min(8, t * u)
    io, ii = split(Y.i, max(t, u))
}
""")
    op = mod["scale"]
    for spec, l1, expected in [("c -registers=32 -l1=49152", 49152, 12),
                               ("c -registers=32 -l1=32768", 32768, 8),
                               ("c -registers=16 -l1=32768", 32768, 6)]:
        knob = op.schedule(target=Target(spec)).knobs[0]
        assert knob.default == expected, (spec, knob.default)
    sched = op.schedule()
    assert str(sched.constraints[0]) == "(max(t, u)) <= (min(8, (t * u)))"
    space = ConfigSpace.from_schedule(sched)
    valid = [space.config(i) for i in space.valid_indices()]
    assert {"t": 12, "u": 4} not in valid and {"t": 2, "u": 4} in valid
    assert all(max(c["t"], c["u"]) <= min(8, c["t"] * c["u"]) for c in valid)
    x = np.arange(37, dtype=np.float32)
    np.testing.assert_array_equal(op.build(config={"t": 2, "u": 4})(x), 2 * x)



def test_a_default_may_name_the_sizes_and_a_free_size_counts_as_unbounded():
    """TVM-style fallback configurations: a knob default computed from the op's sizes and
    attributes where the build fixes them; a size left free is unbounded (min(a, N) is a)."""
    op = tdsl.loads("""
op blur(X: f32[N, D]; k: int = 3) -> Y: f32[N, D] { Y[n, d] = X[n, d] * f32(k) }
schedule blur for cpu {
    knob t in [1, 2, 4, 8] = min(registers // 4, N)
    knob u in [1, 2, 3] = max(1, 4 // D)
    knob v in [1, 3, 6] = 2 * k
    io, ii = split(Y.n, t)
    jo, ji = split(Y.d, u)
}
""")["blur"]

    def defaults(**shapes):
        sched = op.schedule(target=Target("c -registers=32"), shapes=shapes or None)
        return {kn.name: kn.default for kn in sched.knobs}
    assert defaults() == {"t": 8, "u": 1, "v": 6}
    assert defaults(N=2, D=2) == {"t": 2, "u": 2, "v": 6}
    assert defaults(N=3, D=1) == {"t": 2, "u": 3, "v": 6}     # 3 snaps to the choice below
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(op.build(shapes={"N": 3, "D": 2})(x), 3 * x)
    undefined = tdsl.loads("""
op f(X: f32[N]) -> Y: f32[N] { Y[i] = X[i] }
schedule f for cpu {
    knob t in [1, 2, 4] = N - N
    io, ii = split(Y.i, t)
}
""")["f"]
    with pytest.raises(tdsl.ScheduleError, match="no value while a size in it is not fixed"):
        undefined.schedule()
    assert undefined.schedule(shapes={"N": 8}).knobs[0].default == 1


def test_a_convolution_of_one_input_channel_per_block_takes_a_single_row_tile():
    """conv2d_nchwc defaults to the single-row 2 x 1 x 7 tile with 32 vector registers, with
    one input channel per block (the RGB stem: 1 x 2 x 14 ran ResNet-50's stem at 0.6x the
    speed, 1 x 1 x 7 at 0.83x) as with others; with 16 the others take the 4 x 1 x 3 tile (12
    accumulators, each broadcast input feeding 4 FMAs) and the stem 2 x 1 x 4 (4 x 1 x 3
    spilled an accumulator there). tests/test_graph_speed_shapes.py has their conditions
    (enough filter blocks)."""
    op = tdsl.stdlib["conv2d_nchwc"]

    def tile(spec, ci):
        sched = op.schedule(target=Target(spec), shapes={"CI": ci})
        d = {kn.name: kn.default for kn in sched.knobs}
        return d["nb"], d["ty"], d["tx"]
    assert tile("c -lanes=16 -registers=32", 1) == (2, 1, 7)
    assert tile("c -lanes=16 -registers=32", 16) == (2, 1, 7)
    assert tile("c -lanes=8 -registers=16", 1) == (2, 1, 4)
    assert tile("c -lanes=8 -registers=16", 8) == (4, 1, 3)


def test_an_unknown_name_in_a_schedule_names_the_target_constants():
    mod = tdsl.loads("""
op scale(X: f32[N]) -> Y: f32[N] { Y[i] = 2.0 * X[i] }
schedule scale for cpu { o, i = split(Y.i, lane) }
""")
    with pytest.raises(tdsl.ScheduleError, match="lanes, registers"):
        mod["scale"].schedule()


def _std_arguments(name, rng):
    """Awkward sizes for each std op (no tile, lane count or block divides them)."""
    f = lambda *s: rng.standard_normal(s, dtype=np.float32)      # noqa: E731
    return {
        "matmul": ((f(13, 37), f(37, 19)), {}),
        "batch_matmul": ((f(2, 7, 11), f(2, 11, 21)), {}),
        "dense": ((f(5, 23), f(29, 23), f(29)), {}),
        "conv2d": ((f(1, 5, 11, 9), f(19, 5, 3, 3)), {"padding": 1}),
        "depthwise_conv2d": ((f(2, 6, 10, 13), f(6, 1, 3, 3)), {"padding": 1}),
        "softmax": ((f(6, 37),), {}),
        "layer_norm": ((f(6, 37), f(37), f(37)), {}),
        "max_pool2d": ((f(1, 3, 11, 13),), {"kernel": 3, "stride": 2, "padding": 1}),
        "avg_pool2d": ((f(1, 3, 11, 13),), {"kernel": 2}),
        "relu": ((f(7, 19),), {}),
    }[name]


STD_OPS = ["matmul", "batch_matmul", "dense", "conv2d", "depthwise_conv2d", "softmax",
           "layer_norm", "max_pool2d", "avg_pool2d", "relu"]


@pytest.mark.parametrize("spec", ["c", *X86_LEVELS])
@pytest.mark.parametrize("name", STD_OPS)
def test_std_ops_match_the_reference_on_each_isa_level(name, spec):
    op = tdsl.stdlib[name]
    arrays, attrs = _std_arguments(name, np.random.default_rng(1))
    kernel = op.build(spec, shapes=op.sizes_of(*arrays, **attrs), **attrs)
    np.testing.assert_allclose(kernel(*arrays), op.reference(*arrays, **attrs),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-gcc") is None,
                    reason="aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu) is not installed")
def test_a_cross_build_compiles_and_is_refused_when_called():
    arm = Target("c -march=armv8-a")
    assert (arm.arch, arm.lanes, arm.registers) == ("aarch64", 4, 32)
    op = tdsl.stdlib["matmul"]
    kernel = op.build(arm, shapes={"M": 8, "N": 8, "K": 8})
    assert kernel.lib_path.exists() and "tdsl_f32x4" in kernel.source
    with pytest.raises(tdsl.CallError, match="aarch64"):
        kernel(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32))


def test_a_tuning_record_applies_to_its_target_only(tmp_path):
    import json
    from tdsl.tuner.log import Workload, make_record
    op, shapes = tdsl.stdlib["matmul"], {"M": 64, "N": 64, "K": 64}
    v3 = "c -march=x86-64-v3"
    config = {"ti": 4, "tj": 2 * Target(v3).lanes, "nb": 1, "ku": 1, "pack": False}
    record = make_record(Workload.make("std", "matmul", shapes, {}, str(Target(v3))), config,
                         "ok", 1e-3, 1.0)
    log = tmp_path / "tune.jsonl"
    log.write_text(json.dumps(record) + "\n")
    assert op.tuned_config(log, shapes, target=v3) == config
    with pytest.warns(UserWarning, match="no successful record"):
        assert op.tuned_config(log, shapes, target="c") is None


def test_native_named_is_the_host():
    assert Target("c -march=native") == HOST and str(Target("c -march=native")) == "c"


def test_kernels_and_cache_entries_differ_by_target():
    if not X86_LEVELS:
        pytest.skip("needs an x86-64 host")
    op = tdsl.stdlib["matmul"]
    libs = {op.build(spec, shapes={"M": 16, "N": 16, "K": 16}).lib_path
            for spec in ["c", *X86_LEVELS]}
    assert len(libs) == len(X86_LEVELS) + 1


# ------------------------------------------------------------------------------- rfactor

RFACTOR = """
op rowmax(X: f32[N, D]) -> Y: f32[N] { Y[n] = max[d](X[n, d]) }
op rowmean(X: f32[N, D]) -> Y: f32[N] { Y[n] = sum[d](X[n, d]) / f32(D) }
op total(X: f32[N, D]) -> Y: f32[N] { Y[n] = sum[d, e: 3](X[n, d] * f32(e)) }
"""


@pytest.mark.parametrize("name", ["rowmax", "rowmean", "total"])
@pytest.mark.parametrize("d", [1, 3, 8, 17, 40])
@pytest.mark.parametrize("factor", [1, 4, 8])
def test_rfactor_matches_the_reference(name, d, factor):
    op = tdsl.loads(RFACTOR)[name]
    sched = op.schedule("naive").rfactor("Y", "d", factor, "P") \
        .reorder("P", "n", "d_o", "d_i").vectorize("P", "d_i").compute_at("P", "Y", "n")
    x = np.random.default_rng(d).standard_normal((5, d), dtype=np.float32)
    got = op.build(schedule=sched)(x)
    np.testing.assert_allclose(got, op.reference(x), rtol=1e-5, atol=1e-5)


def test_rfactor_errors_name_the_statement():
    mod = tdsl.loads(RFACTOR + """
schedule rowmax for cpu as twice { P = rfactor(Y.d, 4)
    Q = rfactor(Y.d, 4) }
schedule rowmax for cpu as late { o, i = split(Y.n, 2)
    P = rfactor(Y.d, 4) }
schedule rowmax for cpu as nothing { P = rfactor(Y.e, 4) }
""")
    for name, message in [("twice", "no reduction over an axis named d"),
                          ("late", "before the other directives"),
                          ("nothing", "no reduction over an axis named e")]:
        with pytest.raises(tdsl.ScheduleError, match=message) as info:
            mod["rowmax"].lower(name)
        assert info.value.span is not None
