"""reports.record.ladder_with_limits and the console's µs cells."""
import math

import pandas as pd
import pytest

from mamba3_perf import bench
from mamba3_perf.kernels.cases import get_case
from mamba3_perf.reports.console import run_summary
from mamba3_perf.reports.record import ladder_with_limits


def _table(timing_kind: str, us: float):
    case = get_case("N16_P64_R4_C8")
    meta = {"device": "NVIDIA H200" if timing_kind == "device" else "cpu", "timing_kind": timing_kind,
            "cases": [case.to_dict()]}
    rows = [bench._timing_row("stage0", case.id, "ok", "", timing_kind,
                              {"median_us": us, "p10_us": us, "p90_us": us * 1.01, "n_reps": 3})]
    return ladder_with_limits(pd.DataFrame(rows), meta)[0]


def test_fractions_of_the_limits_only_for_device_times():
    dev = _table("device", 400.0)
    assert 0 < dev["frac_hbm_roofline"].iloc[0] < 1 and 0 < dev["frac_serial_bound"].iloc[0] < 1
    cpu = _table("interpreter", 250_000.0)
    assert all(math.isnan(cpu[c].iloc[0]) for c in cpu.columns if c.startswith("frac_"))
    assert cpu["hbm_roofline_us"].iloc[0] == dev["hbm_roofline_us"].iloc[0]  # the bound itself stays


def test_run_summary_writes_large_times_with_separators_not_exponents():
    text = run_summary(_table("interpreter", 256_213.0), width=200)
    assert "256,213" in text and "256,213-258,775" in text and "e+" not in text
    row = next(line for line in text.splitlines() if "stage0" in line)
    assert "%" not in row  # no fraction of a device limit for an interpreter time
    assert "400" in run_summary(_table("device", 400.0), width=200)


def test_the_record_compares_only_device_times_with_the_bounds():
    from mamba3_perf.analysis.ladder import summarize_ladder
    from mamba3_perf.reports.markdown import optimization_record

    def gap_row(timing_kind, us):
        t = _table(timing_kind, us)
        md = optimization_record({"timing_kind": timing_kind}, t, summarize_ladder(t))
        gaps = md[md.index("## Gap to GPU TileLang"):]
        return next(line for line in gaps.splitlines() if line.startswith("| N16_P64_R4_C8"))

    assert gap_row("interpreter", 250_000.0).split("|")[1:3] == [" N16_P64_R4_C8 ", " 250,000 "]
    assert gap_row("interpreter", 250_000.0).rstrip(" |").endswith("-")
    assert gap_row("device", 400.0).rstrip(" |").endswith("x")


def test_a_variant_only_one_run_has_shows_dashes_not_nan():
    from mamba3_perf.analysis.compare import compare_runs
    from mamba3_perf.reports.console import compare_table

    def timings(variants):
        return pd.DataFrame([bench._timing_row(v, "pw-1", "ok", "", "device",
                                               {"median_us": 100.0, "p10_us": 99.0, "p90_us": 101.0, "n_reps": 3})
                             for v in variants])

    text = compare_table(compare_runs(timings(["stage0", "prod"]), timings(["stage0"])), width=200)
    row = next(line for line in text.splitlines() if "prod" in line)
    assert "only in a" in row and "nan" not in row.lower() and row.count(" - ") >= 4


def test_a_recorded_baseline_counts_only_on_its_own_device():
    """The packaged TileLang times are the H200's: an H100 run, an interpreter run or one on an
    unknown GPU gets no 'recorded' ratio from them (an H100 run once read 1.41x of TileLang)."""
    from mamba3_perf.analysis.ladder import summarize_ladder
    from mamba3_perf.analysis.limits import H100, H200
    from mamba3_perf.reports.markdown import optimization_record

    case = get_case("N128_P64_R4_C16")

    def table(device):
        meta = {"device": device, "timing_kind": "device", "cases": [case.to_dict()]}
        rows = [bench._timing_row("stage26_widep", case.id, "ok", "", "device",
                                  {"median_us": 2623.4, "p10_us": 2620.0, "p90_us": 2630.0, "n_reps": 3})]
        return ladder_with_limits(pd.DataFrame(rows), meta)

    h200, _, _, spec = table("NVIDIA H200")
    assert spec is H200 and h200["tilelang_source"].iloc[0] == "recorded"
    assert 1.3 < h200["ratio_vs_tilelang"].iloc[0] < 1.4
    for device in ("NVIDIA H100 80GB HBM3", "cpu", "NVIDIA A100-SXM4-80GB"):
        t, summary, _, spec = table(device)
        assert t["tilelang_us"].isna().all() and t["ratio_vs_tilelang"].isna().all(), device
        md = optimization_record({"device": device, "timing_kind": "device"}, t, summary)
        assert "No TileLang time" in md and "(rec)" not in run_summary(t, width=200)
    t, _, _, spec = table("NVIDIA H100 80GB HBM3")
    assert spec is H100 and t["hbm_roofline_us"].iloc[0] == pytest.approx(
        h200["hbm_roofline_us"].iloc[0] * H200.hbm_bytes_per_s / H100.hbm_bytes_per_s)
    assert "No TileLang time" not in optimization_record(
        {"device": "NVIDIA H200"}, h200, summarize_ladder(h200))


def test_the_latest_step_names_the_cases_of_each_mean():
    """Where stage0 cannot run, the TileLang ratio still has its cases: the sentence says how many
    each mean is over (it once said "over 0 cases" beside a TileLang ratio of one case)."""
    from mamba3_perf.analysis.ladder import summarize_ladder
    from mamba3_perf.reports.markdown import optimization_record

    case = get_case("N128_P64_R4_C16")
    meta = {"device": "NVIDIA H200", "timing_kind": "device", "cases": [case.to_dict()]}
    rows = [bench._timing_row("stage0", case.id, "not runnable", "smem", "device", {}),
            bench._timing_row("prod", case.id, "ok", "", "device",
                              {"median_us": 300.0, "p10_us": 300.0, "p90_us": 300.0, "n_reps": 3}),
            bench._timing_row("tilelang", case.id, "ok", "", "device",
                              {"median_us": 100.0, "p10_us": 100.0, "p90_us": 100.0, "n_reps": 3})]
    t = ladder_with_limits(pd.DataFrame(rows), meta)[0]
    md = optimization_record(meta, t, summarize_ladder(t))
    line = next(x for x in md.splitlines() if x.startswith("Latest step"))
    assert "over 0 of the cases stage0 runs" in line and "3x of TileLang's time (over 1 case)" in line
