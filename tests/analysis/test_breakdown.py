"""stage_breakdown on hand-made KERNEL_EVENTS frames (numbers checked by hand) and a real trace."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mamba3_perf.analysis.breakdown import stage_breakdown
from mamba3_perf.traces.schema import COUNT_COLUMNS, METRIC_COLUMNS, conform, empty


def _events(rows):
    df = pd.DataFrame(rows)
    df["source"], df["device"] = "kineto", "0"
    df["start_us"] = np.arange(len(df), dtype=float)
    return conform(df)


def test_time_share_count_and_weighted_metrics():
    df = _events([
        {"kernel_name": "a", "stage_tag": "scan", "dur_us": 30.0, "aic_mac_ratio": 0.2, "instructions": 7.0},
        {"kernel_name": "a", "stage_tag": "scan", "dur_us": 10.0, "aic_mac_ratio": 0.6, "instructions": 5.0},
        {"kernel_name": "b", "stage_tag": "pre", "dur_us": 10.0},
        {"kernel_name": "c", "stage_tag": "host", "dur_us": 50.0, "aic_mac_ratio": 0.9, "calls": 4},
    ])
    out = stage_breakdown(df)
    assert out.stage_tag.tolist() == ["pre", "scan", "host"]  # ladder order
    assert out.total_us.tolist() == [10.0, 40.0, 50.0]
    assert out.share.tolist() == [0.1, 0.4, 0.5]
    assert out["count"].tolist() == [1, 2, 4]  # calls where given
    assert out.aic_mac_ratio[1] == pytest.approx((30 * 0.2 + 10 * 0.6) / 40)  # 0.3
    assert np.isnan(out.aic_mac_ratio[0])
    assert out.instructions[1] == 12.0 and out.instructions.isna().tolist() == [True, False, True]  # counts add up
    assert list(out.columns[-len(METRIC_COLUMNS):]) == list(METRIC_COLUMNS)


def test_per_variant_shares_sum_to_one_each():
    df = _events([
        {"kernel_name": "f", "stage_tag": "fused", "variant": "stage0", "dur_us": 100.0},
        {"kernel_name": "p", "stage_tag": "pre", "variant": "prod", "dur_us": 20.0},
        {"kernel_name": "s", "stage_tag": "scan", "variant": "prod", "dur_us": 60.0},
    ])
    out = stage_breakdown(df)
    assert out[["variant", "stage_tag"]].values.tolist() == [["prod", "pre"], ["prod", "scan"], ["stage0", "fused"]]
    assert out.share.tolist() == [0.25, 0.75, 1.0]


def test_empty_input_keeps_columns():
    out = stage_breakdown(empty())
    assert len(out) == 0
    assert list(out.columns) == ["stage_tag", "total_us", "share", "count", *COUNT_COLUMNS, *METRIC_COLUMNS]


def test_mixing_kernel_and_region_rows_is_refused():
    df = _events([{"kernel_name": "f", "stage_tag": "fused", "dur_us": 10.0},
                  {"kernel_name": "f", "stage_tag": "fused", "region": "scan", "dur_us": 4.0}])
    with pytest.raises(ValueError, match="mixes"):
        stage_breakdown(df)
    out = stage_breakdown(df[df.region.notna()])
    assert out.region.tolist() == ["scan"] and out.total_us.tolist() == [4.0]


def test_real_op_summary_breakdown():
    from mamba3_perf.traces import load

    data = Path(__file__).resolve().parents[1] / "data" / "ascend" / "real_cann_minimal"
    out = stage_breakdown(load(data))
    # two sanitized_kernel tasks: 42399.120 + 42058.480 us; aic_scalar_ratio 0.841 and 0.947
    assert out.total_us.tolist() == [pytest.approx(84457.6)]
    assert out.aic_scalar_ratio[0] == pytest.approx((42399.12 * 0.841 + 42058.48 * 0.947) / 84457.6)


def test_kernel_stalls_weighted_per_kernel_and_leading_reason():
    from mamba3_perf.analysis.breakdown import kernel_stalls, leading_stall

    df = _events([
        {"kernel_name": "a", "stage_tag": "aux", "dur_us": 30.0, "cycles_per_issue": 8.0,
         "stall_long_scoreboard": 2.0, "stall_barrier": 3.0},
        {"kernel_name": "a", "stage_tag": "aux", "dur_us": 10.0, "cycles_per_issue": 12.0,
         "stall_long_scoreboard": 6.0, "stall_barrier": 1.0},
        {"kernel_name": "b", "stage_tag": "pre", "dur_us": 50.0, "cycles_per_issue": 4.0, "stall_wait": 1.0},
        {"kernel_name": "c", "stage_tag": "post", "dur_us": 99.0},  # no warp-state data: left out
    ])
    out = kernel_stalls(df)
    assert out.kernel_name.tolist() == ["b", "a"]  # longest first
    a = out.set_index("kernel_name").loc["a"]
    assert a.total_us == 40.0 and a.cycles_per_issue == pytest.approx(9.0)  # (30*8 + 10*12) / 40
    assert a.stall_long_scoreboard == pytest.approx(3.0) and a.stall_barrier == pytest.approx(2.5)
    assert a.leading == "long_scoreboard" and np.isnan(a.stall_wait)
    assert leading_stall(a.to_dict()) == ("long_scoreboard", pytest.approx(3.0), pytest.approx(3.0 / 9.0))
    assert out.set_index("kernel_name").loc["b", "leading"] == "wait"
    assert kernel_stalls(df[df.kernel_name == "c"]).empty
    assert leading_stall({"cycles_per_issue": 3.0}) is None


def test_kernel_traffic_floor_per_kernel_on_the_stage17_ncu_page():
    from mamba3_perf.analysis.breakdown import kernel_traffic
    from mamba3_perf.traces import parse_ncu

    rec = Path(__file__).resolve().parents[2] / "records" / "ncu-N128_P64_R4_C16" / "stage17_scanpass-stalls-raw.csv"
    events = parse_ncu(rec)
    out = kernel_traffic(events, 4.3e12)
    assert out.kernel_name.iloc[0] == "bwd_bwd_aux_streamed_kernel" and len(out) == 7  # longest first
    aux = out.iloc[0]
    assert aux.dram_bytes == pytest.approx(2.1673e9, rel=1e-4)
    assert aux.floor_us == pytest.approx(aux.dram_bytes / 4.3e6) and aux.vs_floor == pytest.approx(1390.336 / aux.floor_us)
    # the whole design: 6.14 GB, 1427 us at 4.3 TB/s, above the issue's 0.98 ms target on its own
    assert out.dram_bytes.sum() == pytest.approx(6.137e9, rel=1e-3) and out.floor_us.sum() == pytest.approx(1427, rel=1e-3)
    assert kernel_traffic(events.drop(columns=["dram_bytes"]), 4.3e12).empty


def test_kernel_traffic_sums_launches_and_skips_kernels_without_bytes():
    from mamba3_perf.analysis.breakdown import kernel_traffic

    df = _events([
        {"kernel_name": "a", "stage_tag": "aux", "dur_us": 3.0, "dram_bytes": 2e6},
        {"kernel_name": "a", "stage_tag": "aux", "dur_us": 5.0, "dram_bytes": 2e6},
        {"kernel_name": "b", "stage_tag": "pre", "dur_us": 1.0, "dram_bytes": 0.0},
        {"kernel_name": "c", "stage_tag": "post", "dur_us": 99.0},
    ])
    out = kernel_traffic(df, 1e12).set_index("kernel_name")
    assert list(out.index) == ["a", "b"]
    assert out.loc["a", "total_us"] == 8.0 and out.loc["a", "floor_us"] == pytest.approx(4.0)
    assert out.loc["a", "vs_floor"] == pytest.approx(2.0) and np.isnan(out.loc["b", "vs_floor"])
