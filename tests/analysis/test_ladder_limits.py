"""Ladder speedups, the recorded TileLang baseline, and the limit model against hand numbers."""
import math

import pandas as pd
import pytest

from mamba3_perf.analysis.ladder import (
    ladder_table, load_gpu_baseline, resolve_cases, summarize_ladder, variant_order,
)
from mamba3_perf.analysis.limits import (
    ASCEND_910B, H200, case_limits, fraction_of_limits, matmul_flops, unique_bytes, with_limits,
)
from mamba3_perf.errors import ParseError
from mamba3_perf.kernels.cases import get_case


def _t(rows):
    cols = ["variant", "case_id", "status", "reason", "median_us", "p10_us", "p90_us"]
    return pd.DataFrame([dict(zip(cols, r)) for r in rows])


TIMINGS = _t([
    ("stage0", "N64_P64_R4_C16", "ok", "", 100.0, 95, 105),
    ("stage1_pre", "N64_P64_R4_C16", "ok", "", 50.0, 48, 52),
    ("prod", "N64_P64_R4_C16", "ok", "", 25.0, 24, 26),
    ("stage0", "N32_P64_R4_C16", "ok", "", 40.0, 39, 41),
    ("stage1_pre", "N32_P64_R4_C16", "ok", "", 40.0, 39, 41),
    ("prod", "N32_P64_R4_C16", "wrong", "dq err 1e-1 > bound", 5.0, 5, 5),
    ("stage0", "N256_P64_R4_C8", "not runnable", "smem 300 KB > 227 KB", math.nan, math.nan, math.nan),
    ("prod", "N256_P64_R4_C8", "ok", "", 10.0, 9, 11),
    ("tilelang", "N32_P64_R4_C16", "ok", "", 20.0, 19, 21),
    ("tilelang", "N256_P64_R4_C8", "wrong", "upstream bf16 arithmetic; timed for reference", 8.0, 8, 8),
    ("tilelang", "N64_P64_R4_C16", "not runnable", "tilelang not importable", math.nan, math.nan, math.nan),
])


def test_baseline_loads_and_keys_by_shape():
    b = load_gpu_baseline()
    assert len(b) == 14 and b.attrs["device"]["name"] == "NVIDIA H200"
    row = b[(b.B == 4) & (b.S == 2048) & (b.N == 64) & (b.P == 64) & (b.C == 16)]
    assert row["dtype"].item() == "bfloat16"
    assert row["bwd_bwd_us"].item() == pytest.approx(1433.2)


def test_baseline_errors(tmp_path):
    p = tmp_path / "b.json"
    p.write_text('{"cases": [{"B": 1}]}')
    with pytest.raises(ParseError, match="lacks"):
        load_gpu_baseline(p)
    p.write_text("[]")
    with pytest.raises(ParseError, match="'cases'"):
        load_gpu_baseline(p)


def test_ladder_table_speedups_and_tilelang():
    cases = resolve_cases(TIMINGS["case_id"])
    t = ladder_table(TIMINGS, cases=cases, baseline=load_gpu_baseline())
    get = lambda v, c: t[(t.variant == v) & (t.case_id == c)].iloc[0]
    assert get("prod", "N64_P64_R4_C16").speedup_vs_stage0 == pytest.approx(4.0)
    assert math.isnan(get("prod", "N32_P64_R4_C16").speedup_vs_stage0)  # wrong: no speedup
    assert math.isnan(get("prod", "N256_P64_R4_C8").speedup_vs_stage0)  # stage0 cannot run
    live = get("stage1_pre", "N32_P64_R4_C16")
    assert live.tilelang_source == "live" and live.ratio_vs_tilelang == pytest.approx(2.0)
    bf16 = get("prod", "N256_P64_R4_C8")  # a live row timed for reference counts
    assert bf16.tilelang_source == "live" and bf16.ratio_vs_tilelang == pytest.approx(10.0 / 8.0)
    rec = get("prod", "N64_P64_R4_C16")  # the live row did not run: the recorded one
    assert rec.tilelang_source == "recorded"
    assert rec.ratio_vs_tilelang == pytest.approx(25.0 / 1433.2)
    assert list(t[t.case_id == "N64_P64_R4_C16"].variant) == ["stage0", "stage1_pre", "prod", "tilelang"]


def test_summary_geomean_and_unrunnable():
    s = summarize_ladder(ladder_table(TIMINGS))
    pv = s.per_variant.set_index("variant")
    assert pv.loc["stage1_pre", "geomean_speedup_vs_stage0"] == pytest.approx(math.sqrt(2.0 * 1.0))
    assert pv.loc["prod", "geomean_speedup_vs_stage0"] == pytest.approx(4.0)
    assert pv.loc["prod", "missing"] == ("N32_P64_R4_C16",)
    assert pv.loc["stage1_pre", "geomean_step_speedup"] == pytest.approx(math.sqrt(2.0))
    assert pv.loc["prod", "parent"] == "stage1_pre"  # the previous step present in the run
    assert pv.loc["prod", "geomean_step_speedup"] == pytest.approx(2.0)
    assert s.stage0_not_runnable == (("N256_P64_R4_C8", "smem 300 KB > 227 KB"),)
    assert variant_order(["tilelang", "zz", "prod", "stage0"]) == ["stage0", "prod", "zz", "tilelang"]


def test_unique_bytes_match_anchor():
    case = get_case("N64_P64_R4_C16")  # B=4 S=2048 H=16 G=1 bf16
    assert unique_bytes(case, states_bytes=2) == 302776320
    assert unique_bytes(case, states_bytes=4) == 302776320 + 4 * 16 * 128 * 64 * 64 * 2
    b = load_gpu_baseline()
    for r in b.itertuples():
        c = case.with_(B=r.B, S=r.S, H=r.H, G=r.G, N=r.N, P=r.P, R=r.R, C=r.C, dtype=r.dtype)
        assert unique_bytes(c) == r.unique_bytes


def test_limits_by_hand():
    case = get_case("N64_P64_R4_C16")
    CR, N, P, nc = 64, 64, 64, 128
    macs = 3 * CR * CR * N + 2 * CR * CR * P + 4 * CR * N * P
    assert matmul_flops(case) == 2 * macs * 4 * 16 * nc
    lim = case_limits(case, H200)
    assert lim["hbm_roofline_us"] == pytest.approx(302776320 / 4.3e12 * 1e6)  # 70.41 in the anchor
    assert lim["compute_bound_us"] == pytest.approx(2 * macs * 4 * 16 * nc / 7.9e14 * 1e6)
    assert lim["serial_bound_us"] == pytest.approx(128.0)
    assert lim["bound_by"] == "serial" and lim["lower_bound_us"] == pytest.approx(128.0)
    fr = fraction_of_limits(1433.2, lim)
    assert fr["hbm"] == pytest.approx(lim["hbm_roofline_us"] / 1433.2)
    assert math.isnan(fraction_of_limits(0.0, lim)["serial"])
    assert ASCEND_910B.ub_bytes == 192 * 1024
    fp32 = case.with_(dtype="float32")
    assert math.isnan(case_limits(fp32, ASCEND_910B)["compute_bound_us"])
    assert case_limits(fp32, ASCEND_910B)["bound_by"] in ("hbm", "serial")


def test_with_limits_columns():
    cases = resolve_cases(TIMINGS["case_id"])
    t = with_limits(ladder_table(TIMINGS), cases)
    row = t[(t.variant == "prod") & (t.case_id == "N64_P64_R4_C16")].iloc[0]
    assert row.frac_serial_bound == pytest.approx(128.0 / 25.0)
    nr = t[(t.variant == "stage0") & (t.case_id == "N256_P64_R4_C8")].iloc[0]
    assert math.isnan(nr.frac_hbm_roofline)


def test_resolve_cases_prefers_run_metadata():
    meta = [dict(get_case("N64_P64_R4_C16").to_dict(), id="custom", B=1)]
    got = resolve_cases(["custom", "N64_P64_R4_C16", "unknown-id"], meta)
    assert got["custom"].B == 1 and got["N64_P64_R4_C16"].B == 4 and "unknown-id" not in got


def test_step_gain_and_tilelang_ratio_where_stage0_cannot_run():
    t = _t([("stage0", "N128_P64_R4_C16", "not runnable", "smem", math.nan, math.nan, math.nan),
            ("stage5_rankloop", "N128_P64_R4_C16", "ok", "", 30.0, 29, 31),
            ("prod", "N128_P64_R4_C16", "ok", "", 15.0, 14, 16),
            ("tilelang", "N128_P64_R4_C16", "wrong", "upstream bf16 arithmetic", 5.0, 5, 5)])
    pv = summarize_ladder(ladder_table(t)).per_variant.set_index("variant")
    assert pv.loc["prod", "geomean_step_speedup"] == pytest.approx(2.0)
    assert pv.loc["prod", "geomean_ratio_vs_tilelang"] == pytest.approx(3.0)
    assert math.isnan(pv.loc["prod", "geomean_speedup_vs_stage0"]) and pv.loc["prod", "n_cases"] == 0
    assert pv.loc["prod", "n_tilelang_cases"] == 1 and pv.loc["tilelang", "n_tilelang_cases"] == 0


def test_device_among_takes_the_first_recognized_name():
    from mamba3_perf.analysis.limits import ASCEND_910B, H200, device_among

    assert device_among(["0", None, "Ascend910B2", "NVIDIA H200"]) is ASCEND_910B
    assert device_among(["0", float("nan")]) is H200 and device_among([], default=ASCEND_910B) is ASCEND_910B


def test_an_h100_gets_its_own_memory_and_the_h200s_sms():
    """nvidia-smi names the H100 'NVIDIA H100 80GB HBM3'; its HBM3 is 3.35 TB/s against the H200's
    measured 4.3, while its SMs (and so the residency model and matrix rates) are the same."""
    from mamba3_perf.analysis.limits import H100, H200, case_limits, device_for

    assert device_for("NVIDIA H100 80GB HBM3") is H100 and device_for("NVIDIA H200") is H200
    assert device_for("NVIDIA A100-SXM4-80GB", default=None) is None
    case = get_case("N128_P64_R4_C16")
    h100, h200 = case_limits(case, H100), case_limits(case, H200)
    assert h100["hbm_roofline_us"] == pytest.approx(h200["hbm_roofline_us"] * 4.3 / 3.35)
    assert h100["compute_bound_us"] == h200["compute_bound_us"] and H100.sm_count == 132
