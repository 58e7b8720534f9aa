"""bench.measure on the CPU interpreter: ok, not runnable (raises), wrong (bad numbers), tilelang."""
import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest

from mamba3_perf import bench, profile, tilelang_row
from mamba3_perf.errors import BackendError, CaseError, StageError
from mamba3_perf.kernels import registry
from mamba3_perf.kernels.cases import get_case
from mamba3_perf.kernels.registry import KernelSpec, StageSpec, Tag, register_stage


def _raises(x, out, meta):
    raise RuntimeError("OutOfResources: shared memory, Required: 300000\nsecond line")


def _wrong(x, out, meta):
    for t in out.values():
        if t is not None:
            t.fill_(1.0)


@pytest.fixture(scope="module")
def measured():
    tag = uuid.uuid4().hex[:8]
    bad, wrong = f"test_raises_{tag}", f"test_wrong_{tag}"
    register_stage(StageSpec(bad, "stage0", "raises", _raises, (KernelSpec("k_bad", Tag.FUSED),)))
    register_stage(StageSpec(wrong, "stage0", "wrong numbers", _wrong))
    steps = []
    try:
        t, a = bench.measure([get_case("pw-1")], ["stage0", bad, wrong], device="cpu",
                             timing_kind="interpreter", tilelang=True, progress=steps.append)
    finally:
        registry._STAGES.pop(bad, None)
        registry._STAGES.pop(wrong, None)
    return t.set_index("variant"), a, bad, wrong, steps


def test_stage0_ok_and_timed(measured):
    t, a, *_ = measured
    r = t.loc["stage0"]
    assert r["status"] == "ok" and r["reason"] == "" and r["timing_kind"] == "interpreter"
    assert r["n_reps"] == bench.INTERPRETER_REPS and 0 < r["p10_us"] <= r["median_us"] <= r["p90_us"]
    s0 = a[a["variant"] == "stage0"]
    assert len(s0) == 12 and s0["passed"].all()


def test_raising_stage_is_not_runnable_with_reason(measured):
    t, a, bad, _, _ = measured
    r = t.loc[bad]
    assert r["status"] == "not runnable"
    assert r["reason"] == "RuntimeError: OutOfResources: shared memory, Required: 300000"
    assert math.isnan(r["median_us"]) and (a["variant"] == bad).sum() == 0


def test_wrong_stage_has_accuracy_rows_and_no_time(measured):
    t, a, _, wrong, _ = measured
    r = t.loc[wrong]
    assert r["status"] == "wrong" and "fails the golden check" in r["reason"]
    assert math.isnan(r["median_us"]) and r["n_reps"] == 0
    rows = a[a["variant"] == wrong]
    assert len(rows) == 12 and not rows["passed"].all()


def test_tilelang_unavailable_here_is_recorded(measured):
    t, *_ , steps = measured
    assert tilelang_row.available() is False
    assert t.loc["tilelang", "status"] == "not runnable"
    assert t.loc["tilelang", "reason"] == tilelang_row.UNAVAILABLE
    assert len(steps) == 4  # one progress call per (case, variant)


def test_timing_rounds_interleave_variants_and_pool_samples():
    calls = []

    def runner(name, fail_after=None):
        def fn():
            if fail_after is not None and calls.count(name) >= fail_after:
                raise RuntimeError("CUDA error: an illegal memory access")
            calls.append(name)
        return fn

    todo = {"a": (runner("a"), "ok", ""), "b": (runner("b"), "wrong", "upstream"),
            "c": (runner("c", fail_after=bench.INTERPRETER_REPS), "ok", "")}
    rows = bench._time_interleaved(todo, get_case("pw-1"), device="cpu", timing_kind="interpreter",
                                   warmup_ms=1, rep_ms=1, rounds=2)
    k = bench.INTERPRETER_REPS
    assert calls == ["a"] * k + ["b"] * k + ["c"] * k + ["a"] * k + ["b"] * k
    assert rows["a"]["n_reps"] == 2 * k and rows["a"]["status"] == "ok"
    assert rows["b"]["status"] == "wrong" and rows["b"]["reason"] == "upstream"
    assert rows["c"]["status"] == "not runnable" and "while timing: RuntimeError" in rows["c"]["reason"]
    assert math.isnan(rows["c"]["median_us"])


def test_skipped_stage_is_recorded_not_runnable_without_running(monkeypatch):
    ran = []
    monkeypatch.setattr(bench, "variant_runner", lambda v, case, x: ran.append(v) or (lambda: None))
    t, a = bench.measure([get_case("pw-1")], ["stage1_pre"], device="cpu", timing_kind="interpreter",
                         check=False, skip={"stage1_pre": "compile did not end within 450 s"})
    r = t.set_index("variant").loc["stage1_pre"]
    assert (r["status"], r["reason"], r["n_reps"]) == ("not runnable", "compile did not end within 450 s", 0)
    assert ran == [] and a.empty


def test_ladder_script_without_check_builds_no_golden(monkeypatch, tmp_path):
    """benchmarks/ladder.py --no-check (h200_warm.sh's stage units): compile and run only."""
    import importlib.util

    from mamba3_perf.kernels import checking

    monkeypatch.setattr(checking, "oracles", lambda *a, **k: pytest.fail("golden built"))
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "ladder.py"
    spec = importlib.util.spec_from_file_location("ladder_script", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--cases", "pw-1", "--stages", "stage0", "--no-check", "--out", str(tmp_path),
              "--json", str(tmp_path / "r.json")])
    rec = json.loads((tmp_path / "r.json").read_text())
    assert [(t["status"], t["reason"]) for t in rec["timings"]] == [("ok", "accuracy not checked")]
    assert rec["accuracy"] == []


def test_unknown_stage_fails_before_running():
    with pytest.raises(StageError, match="unknown stage"):
        bench.measure([get_case("pw-1")], ["nope"], device="cpu", timing_kind="interpreter")


def test_selection():
    ids = [c.id for c in bench.select_cases("pw-1,tail")]
    assert ids == ["pw-1", "tail-33", "tail-40", "tail-50"]
    with pytest.raises(CaseError):
        bench.select_cases("no-such-case")
    assert bench.select_stages("stage0,tilelang") == (["stage0"], True)
    assert bench.select_stages("all")[0][0] == "stage0"
    assert bench.select_stages("stage10_fewscratch@tf32,tilelang") == (["stage10_fewscratch@tf32"], True)
    with pytest.raises(StageError, match="precision after '@'"):
        bench.select_stages("stage0@bf16")
    with pytest.raises(StageError, match="unknown stage"):
        bench.select_stages("nope@tf32")


def test_states_dtype_follows_upstream():
    import torch

    assert bench.default_states_dtype(get_case("pw-1")) == torch.bfloat16
    assert bench.default_states_dtype(get_case("pw-3")) == torch.float32


def test_interpreter_budget():
    small = profile.default_case("cpu")
    assert profile.check_interpreter_budget(small, 1) < 10
    big = profile.default_case("cuda")
    with pytest.raises(BackendError, match=r"about \d+ s"):
        profile.check_interpreter_budget(big, 1)
    assert profile.check_interpreter_budget(big, 1, force=True) > profile.INTERPRETER_LIMIT_S
    # the README's main job, a plain `perf profile` on the CPU, runs the default shape on every stage
    profile.check_interpreter_budget(small, len(registry.list_stages()))


def test_merge_metrics_duration_weighted():
    ev = pd.DataFrame({"variant": ["s", "s", "t"], "kernel_name": ["k", "h", "k"],
                       "dur_us": [1.0, 1.0, 1.0], "tensor_pipe_pct": [float("nan")] * 3})
    hw = pd.DataFrame({"variant": ["s", "s"], "kernel_name": ["k", "k"], "dur_us": [1.0, 3.0],
                       "tensor_pipe_pct": [10.0, 50.0], "instructions": [100.0, 100.0]})
    out = profile.merge_metrics(ev, hw)
    assert out["tensor_pipe_pct"].tolist()[0] == 40.0 and out["tensor_pipe_pct"].isna().tolist()[1:] == [True, True]
    assert out["instructions"].tolist()[0] == 100.0 and out["instructions"].isna().tolist()[1:] == [True, True]


def test_ncu_command_names_the_parsers_metrics():
    cmd = profile.ncu_command(get_case("pw-1"), "stage0")
    assert cmd[:6] == ["ncu", "--csv", "--page", "raw", "--clock-control", "none"]
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert "gpu__time_duration.sum" in metrics and "dram__bytes_read.sum" in metrics
    assert "smsp__inst_executed.sum" in metrics  # the instructions column
    assert cmd[-4:-2] == ["--case-json", cmd[-3]] and cmd[-1] == "stage0"


def _part(case_id: str, us: float, commit: str) -> dict:
    meta = {"device": "NVIDIA H200", "backend": "cuda", "timing_kind": "device",
            "stages": ["stage0", "prod"], "git_commit": commit, "command": f"ladder {case_id}",
            "cases": [get_case(case_id).to_dict()]}
    timings = [bench._timing_row(v, case_id, "ok", "", "device",
                                 {"median_us": t, "p10_us": t, "p90_us": t, "n_reps": 3})
               for v, t in (("stage0", us), ("prod", us / 4))]
    return {"meta": meta, "timings": timings, "accuracy": []}


def test_merge_records_rebuilds_the_ladder_over_all_parts():
    rec = bench.merge_records([_part("N16_P64_R4_C8", 400.0, "a"), _part("N32_P64_R4_C16", 900.0, "b")],
                              command="h200_ladder.sh", unfinished={"N128_P64_R8_C8": "compile timed out"})
    meta = rec["meta"]
    assert [c["id"] for c in meta["cases"]] == ["N16_P64_R4_C8", "N32_P64_R4_C16"]
    assert [p["git_commit"] for p in meta["parts"]] == ["a", "b"]
    assert meta["command"] == "h200_ladder.sh" and meta["unfinished_cases"] == {"N128_P64_R8_C8": "compile timed out"}
    prod = next(v for v in rec["ladder"]["per_variant"] if v["variant"] == "prod")
    assert prod["n_cases"] == 2 and prod["geomean_speedup_vs_stage0"] == pytest.approx(4.0)
    assert len(rec["timings"]) == 4 and {lim["case_id"] for lim in rec["limits"]} == {"N16_P64_R4_C8", "N32_P64_R4_C16"}


def test_merge_records_adds_a_late_case_to_a_merged_record():
    merged = bench.merge_records([_part("N16_P64_R4_C8", 400.0, "a"), _part("N32_P64_R4_C16", 900.0, "b")],
                                 command="h200_ladder.sh", unfinished={"N128_P64_R8_C8": "compile timed out"})
    rec = bench.merge_records([merged, _part("N128_P64_R8_C8", 800.0, "c")], command="ladder R8")
    meta = rec["meta"]
    assert [p["git_commit"] for p in meta["parts"]] == ["a", "b", "c"]
    assert meta["unfinished_cases"] == {} and meta["command"] == "h200_ladder.sh ; then ladder R8"
    prod = next(v for v in rec["ladder"]["per_variant"] if v["variant"] == "prod")
    assert prod["n_cases"] == 3 and len(rec["timings"]) == 6


def test_merge_records_refuses_mixed_devices_and_repeated_cases():
    a, b = _part("N16_P64_R4_C8", 400.0, "a"), _part("N16_P64_R4_C8", 400.0, "a")
    with pytest.raises(ValueError, match="more than one record"):
        bench.merge_records([a, b], command="x")
    b = _part("N32_P64_R4_C16", 400.0, "a")
    b["meta"]["device"] = "NVIDIA A100"
    with pytest.raises(ValueError, match="differ in device"):
        bench.merge_records([a, b], command="x")
    with pytest.raises(ValueError, match="no records"):
        bench.merge_records([], command="x")


def test_merge_records_refuses_mixed_graph_and_eager_timings():
    a, b = _part("N16_P64_R4_C8", 400.0, "a"), _part("N32_P64_R4_C16", 900.0, "b")
    a["meta"].pop("cuda_graph", None)  # a record from before graph timing: eager calls
    b["meta"]["cuda_graph"] = False
    assert bench.merge_records([a, b], command="x")["meta"]["cases"][1]["id"] == "N32_P64_R4_C16"
    b["meta"]["cuda_graph"] = True
    with pytest.raises(ValueError, match="differ in cuda_graph"):
        bench.merge_records([a, b], command="x")


def test_graph_timing_needs_cuda_and_says_so_before_running(monkeypatch):
    monkeypatch.setattr(bench, "variant_runner", lambda *a: pytest.fail("ran a variant"))
    with pytest.raises(BackendError, match="CUDA-graph timing needs the cuda backend"):
        bench.measure([get_case("pw-1")], ["stage0"], device="cpu", timing_kind="interpreter",
                      graph=True)
    with pytest.raises(BackendError, match="CUDA-graph timing needs a CUDA device"):
        bench.time_samples_us(lambda: pytest.fail("called"), device="cpu", graph=True)


def test_graph_timing_times_replays_of_one_captured_call(monkeypatch):
    """The wiring of graph timing, with capture and do_bench stood in (no CUDA here): the
    variant's call is captured once per timing round and do_bench times the replay, not it."""
    import triton.testing

    from mamba3_perf.kernels import graphs

    calls, captured = [], []

    class Graph:
        def replay(self):
            calls.append("replay")

    def capture(fn):
        captured.append(fn)
        return Graph(), None

    def do_bench(fn, warmup, rep, return_mode):
        assert return_mode == "all"
        fn()
        return [0.25, 0.5]

    monkeypatch.setattr(graphs, "capture", capture)
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    variant = lambda: calls.append("eager")  # noqa: E731
    rows = bench._time_interleaved({"v": (variant, "ok", "")}, get_case("pw-1"), device="cuda",
                                   timing_kind="device", warmup_ms=1, rep_ms=1, rounds=2, graph=True)
    assert captured == [variant, variant] and calls == ["replay", "replay"]
    assert rows["v"]["n_reps"] == 4 and rows["v"]["median_us"] == pytest.approx(375.0)


def test_sweep_launch_targets_are_the_kernels_launch_dicts():
    """benchmarks/sweep_launch.py varies the very dicts the launchers read (mutated in place)."""
    import runpy

    from mamba3_perf.kernels.bwd_bwd import common, stage6_statepass, stage7_streamaux, stage9_termsblock

    mod = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "sweep_launch.py"))
    assert mod["launch_dict"]("chunk") is common.CHUNK_LAUNCH
    assert mod["launch_dict"]("stream") is stage7_streamaux.STREAM_LAUNCH
    assert mod["launch_dict"]("terms") is stage9_termsblock.LAUNCH
    assert mod["launch_dict"]("pass") is stage6_statepass.PASS_LAUNCH
    from mamba3_perf.kernels.bwd_bwd import terms_gluon
    assert mod["launch_dict"]("gluon_terms") is terms_gluon.LAUNCH
    assert mod["parse_sweeps"](["stream=4:1,4:3:168", "pass=4:3"]) == [
        ("stream", [(4, 1, None), (4, 3, 168)]), ("pass", [(4, 3, None)])]
    for bad in ("aux=4:1", "stream=4", "stream=4:1:2:3", "stream=four:1"):
        with pytest.raises(SystemExit, match="TARGET"):
            mod["parse_sweeps"]([bad])
    with mod["launch_options"]("terms", 4, 1, 168):  # the register cap travels in the same dict
        assert stage9_termsblock.LAUNCH == dict(num_warps=4, num_stages=1, maxnreg=168)
    assert "maxnreg" not in stage9_termsblock.LAUNCH
    before = dict(stage7_streamaux.STREAM_LAUNCH)
    with pytest.raises(RuntimeError):  # a configuration that fails still gives the defaults back
        with mod["launch_options"]("stream", 8, 2):
            assert stage7_streamaux.STREAM_LAUNCH == dict(before, num_warps=8, num_stages=2)
            raise RuntimeError("does not launch")
    assert stage7_streamaux.STREAM_LAUNCH == before


def test_sweep_knob_exits_on_a_bad_knob(monkeypatch):
    """benchmarks/sweep_knob.py parses its knobs with kernels.knobs (tests/kernels/test_knobs.py);
    a bad one ends the script with the reason."""
    import runpy

    from mamba3_perf.kernels.bwd_bwd import stage25_subchunk

    bench_dir = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench_dir))
    mod = runpy.run_path(str(bench_dir / "sweep_knob.py"))
    assert mod["parse_knobs"](["stage25_subchunk.POST_STEPS=8,none"])[0][:2] == (stage25_subchunk, "POST_STEPS")
    with pytest.raises(SystemExit, match="--knob 'nomodule.X=1'"):
        mod["parse_knobs"](["nomodule.X=1"])


def test_ptxas_stage_counts_programs_per_sm_by_shared_memory_too(monkeypatch):
    """benchmarks/ptxas_stage.py's report line ends with the programs per SM a kernel's registers and
    shared memory allow: at its cap of 168 registers (three programs of 128 threads by registers)
    stage43's aux held two at e432311's 77848 B of shared memory, three at 75800 B."""
    import runpy
    from types import SimpleNamespace

    if "TRITON_INTERPRET" in os.environ:  # the script drops it for real compiles: restored after the test
        monkeypatch.setenv("TRITON_INTERPRET", os.environ["TRITON_INTERPRET"])
    mod = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "ptxas_stage.py"))
    log = "ptxas info    : Used 168 registers, used 1 barriers, 40 bytes cumulative stack size"
    kernel = SimpleNamespace(metadata=SimpleNamespace(shared=77848))
    assert mod["residency"](log, {"num_warps": 4}, kernel) == "2 programs/SM (shared_mem)"
    kernel.metadata.shared = 75800
    assert mod["residency"](log, {"num_warps": 4}, kernel) == "3 programs/SM (registers)"
    assert mod["residency"]("ptxas info    : 0 bytes stack frame", {"num_warps": 4}, kernel).endswith("(no register count)")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="counts through the Triton interpreter")
def test_sweep_knob_traffic_counts_each_combination_per_kernel(monkeypatch, tmp_path):
    """--traffic: per (case, combination, kernel) the bytes analysis.traffic counts, in one record
    with the command that made it; a combination that drops a copy counts fewer bytes."""
    import runpy

    bench_dir = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench_dir))
    mod = runpy.run_path(str(bench_dir / "sweep_knob.py"))
    out = tmp_path / "traffic.json"
    argv = ["--traffic", "--cases", "small-N256_P64_R4_C8", "--stage", "stage25_subchunk", "--knob",
            "stage25_subchunk.READ_INPUTS=0,1", "--samples", "2", "--json", str(out)]
    mod["main"](argv)
    rec = json.loads(out.read_text())
    assert rec["meta"]["command"] == "python benchmarks/sweep_knob.py " + " ".join(argv)
    rows = pd.DataFrame(rec["rows"])
    rows["setting"] = rows["knobs"].map(lambda k: k["stage25_subchunk.READ_INPUTS"])
    total = rows.groupby("setting")["bytes"].sum()
    assert set(rows["kernel"]) >= {"bwd_bwd_pre_halves_kernel", "bwd_bwd_aux_streamed_kernel"}
    assert total[1] < total[0]


def test_sweep_knob_keeps_the_cases_timed_before_one_that_never_ends(monkeypatch, tmp_path):
    """The timing path writes its record after each case (complete: false), so a combination that
    hangs until the device call's deadline (terms_gluon.PIPELINE did) loses only its own case."""
    import runpy
    import types

    bench_dir = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench_dir))
    calls = []

    def measure(fn, case, stage, x, golden, ref, device, bk):
        calls.append(case.id)
        if case.id == "edge-N48":
            raise KeyboardInterrupt  # what the call's deadline does to a process blocked in a kernel
        return {"status": "ok", "median_us": 1.0}

    monkeypatch.setitem(sys.modules, "sweep_launch", types.SimpleNamespace(measure=measure))
    mod = runpy.run_path(str(bench_dir / "sweep_knob.py"))
    out = tmp_path / "rec.json"
    argv = ["--cases", "edge-one-chunk,edge-N48", "--stage", "stage25_subchunk", "--knob",
            "stage25_subchunk.READ_INPUTS=0,1", "--json", str(out)]
    with pytest.raises(KeyboardInterrupt):
        mod["main"](argv)
    rec = json.loads(out.read_text())
    assert calls == ["edge-one-chunk", "edge-one-chunk", "edge-N48"]
    assert rec["meta"]["complete"] is False
    assert [(r["case_id"], r["knobs"]["stage25_subchunk.READ_INPUTS"]) for r in rec["rows"]] == [
        ("edge-one-chunk", 0), ("edge-one-chunk", 1)]


def test_the_device_scripts_import_without_ijson_or_plotly():
    """benchmarks/ladder.py and merge_records.py run on the lent GPU's image, which has torch,
    triton, pandas and rich but neither ijson nor plotly: what they import must not need them."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('ijson', 'plotly'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import mamba3_perf.bench, mamba3_perf.reports.console, mamba3_perf.reports.record\n"
        "import mamba3_perf.runs, mamba3_perf.tilelang_row, mamba3_perf.analysis.limits\n"
        "print('ok')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_tilelang_warm_packs_the_cache_as_h200_warm_unpacks_it(tmp_path):
    """benchmarks/tilelang_warm.py packs a TileLang cache (less its tmp) for h200_warm.sh's
    ``tar xJf TL_CACHE_IN -C cache``; without tilelang it says so and packs nothing."""
    import runpy
    import tarfile

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "tilelang_warm.py"
    mod = runpy.run_path(str(script))
    cache = tmp_path / "cache"
    (cache / "abc123").mkdir(parents=True)
    (cache / "abc123" / "executable.so").write_bytes(b"\x7fELF")
    (cache / "tmp").mkdir()
    (cache / "tmp" / "half-written").write_bytes(b"x")
    out = mod["pack"](cache, tmp_path / "packs" / "tl.tar.xz")
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == ["./abc123", "./abc123/executable.so"]
        dest = tmp_path / "unpacked"
        tar.extractall(dest, filter="data")
    assert (dest / "abc123" / "executable.so").read_bytes() == b"\x7fELF"
    assert [p.name for p in out.parent.iterdir()] == ["tl.tar.xz"]  # no temporary left beside it

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "tilelang.py").write_text("raise ImportError('no tilelang here')\n")
    env["PYTHONPATH"] = str(blocked)
    r = subprocess.run([sys.executable, str(script), "official-b8", "--out", str(tmp_path / "x.tar.xz"),
                        "--cache-dir", str(cache)], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "do not import here" in r.stderr
    assert not (tmp_path / "x.tar.xz").exists()
