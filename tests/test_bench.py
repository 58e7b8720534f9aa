"""bench.measure on the CPU interpreter: ok, not runnable (raises), wrong (bad numbers), tilelang."""
import math
import uuid

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


def test_merge_metrics_duration_weighted():
    ev = pd.DataFrame({"variant": ["s", "s", "t"], "kernel_name": ["k", "h", "k"],
                       "dur_us": [1.0, 1.0, 1.0], "tensor_pipe_pct": [float("nan")] * 3})
    hw = pd.DataFrame({"variant": ["s", "s"], "kernel_name": ["k", "k"], "dur_us": [1.0, 3.0],
                       "tensor_pipe_pct": [10.0, 50.0]})
    out = profile.merge_metrics(ev, hw)
    assert out["tensor_pipe_pct"].tolist()[0] == 40.0 and out["tensor_pipe_pct"].isna().tolist()[1:] == [True, True]


def test_ncu_command_names_the_parsers_metrics():
    cmd = profile.ncu_command(get_case("pw-1"), "stage0")
    assert cmd[:6] == ["ncu", "--csv", "--page", "raw", "--clock-control", "none"]
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert "gpu__time_duration.sum" in metrics and "dram__bytes_read.sum" in metrics
    assert cmd[-4:-2] == ["--case-json", cmd[-3]] and cmd[-1] == "stage0"
