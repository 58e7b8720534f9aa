"""The traces this project recorded itself on the H200 with ``perf profile --shape 8,512,16,8
--hw-metrics`` (run.json, report and timeline in records/profile-8x512x16x8/; command, commit,
versions and clocks there): for every stage and the live TileLang row, the torch.profiler
(Kineto) trace of 3 calls and the ncu raw CSV of one call. Values read by hand from the files."""
from pathlib import Path

import pytest

from mamba3_perf.analysis.breakdown import stage_breakdown
from mamba3_perf.traces import load

RUN = Path(__file__).resolve().parents[1] / "data" / "h200" / "profile-8x512"
VARIANTS = ["stage0", "stage1_pre", "stage2_aux", "stage3_rankfold", "stage4_nblock",
            "stage5_rankloop", "prod", "stage6_statepass", "tilelang"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_trace_parses_and_every_kernel_is_attributed(variant):
    k = load(RUN / f"kineto-{variant}.json", variant=variant)
    n = load(RUN / f"ncu-{variant}.csv", variant=variant)
    own = k[k["stage_tag"] != "host"]  # torch's own fills/copies are launched by host code
    assert len(own) == 3 * len(n) > 0  # 3 traced calls; ncu profiles one
    assert set(own["kernel_name"]) == set(n["kernel_name"])
    assert not (k["stage_tag"] == "other").any() and not (n["stage_tag"] == "other").any()
    assert (k["source"] == "kineto").all() and (n["source"] == "ncu").all()


def test_stage6_kineto_values_and_breakdown():
    k = load(RUN / "kineto-stage6_statepass.json", variant="stage6_statepass")
    aux = k[k["kernel_name"] == "bwd_bwd_aux_rankfold_kernel"].iloc[0]
    # "bwd_bwd_aux_rankfold_kernel": dur 1494.575, grid [4096, 1, 1], block [256, 1, 1],
    # "registers per thread": 255, "shared memory": 65536, stream 7
    assert (aux.dur_us, aux.grid, aux.block, aux.registers_per_thread, aux.smem_bytes, aux.stream) == (
        1494.575, "4096,1,1", "256,1,1", 255, 65536, "7")
    sp = k[k["kernel_name"] == "bwd_bwd_state_pass_kernel"]
    assert list(sp["dur_us"]) == [170.078, 170.078, 171.518] and set(sp["grid"]) == {"128,2,2"}
    b = stage_breakdown(k).set_index("stage_tag")
    assert b.loc["pre", "total_us"] == pytest.approx(326.108 + 326.845 + 327.388)
    assert b.loc["aux", "total_us"] == pytest.approx(1494.575 + 1493.454 + 1493.967)
    assert b.loc["scan", "total_us"] == pytest.approx(170.078 + 170.078 + 171.518)
    # post: state_terms + chunk_sum + post, three calls each
    assert b.loc["post", "total_us"] == pytest.approx(725.912 + 724.087 + 727.767 + 6.272 + 5.664
                                                      + 5.76 + 159.903 + 159.678 + 158.686)
    assert b.loc["post", "count"] == 9 and b.loc["host", "count"] == 3
    assert b["share"].sum() == pytest.approx(1.0)


def test_stage6_ncu_values():
    n = load(RUN / "ncu-stage6_statepass.csv", variant="stage6_statepass").set_index("kernel_name")
    # bwd_bwd_aux_rankfold_kernel: gpu__time_duration.sum "1,502,688" ns, hmma 14.01,
    # alu 11.01, issue 17.17, dram 37.48, warps active 12.49, launch__registers_per_thread 255
    aux = n.loc["bwd_bwd_aux_rankfold_kernel"]
    assert aux.dur_us == 1502.688 and aux.stage_tag == "aux"
    assert (aux.tensor_pipe_pct, aux.alu_pipe_pct, aux.issue_active_pct) == (14.01, 11.01, 17.17)
    assert (aux.dram_throughput_pct, aux.warps_active_pct, aux.registers_per_thread) == (37.48, 12.49, 255)
    assert n.loc["bwd_bwd_state_terms_kernel", "dur_us"] == 701.792
    assert n.loc["bwd_bwd_post_kernel", "warps_active_pct"] == 23.60


def test_tilelang_and_stage0_are_fused_single_kernels():
    t = load(RUN / "kineto-tilelang.json", variant="tilelang")
    assert list(t["kernel_name"].unique()) == ["mamba_mimo_bwd_bwd_kernel_kernel"]
    assert list(t["dur_us"]) == [372.665, 376.183, 372.056] and set(t["grid"]) == {"16,8,1"}
    assert (t["stage_tag"] == "fused").all() and (t["smem_bytes"] == 146080).all()
    n = load(RUN / "ncu-tilelang.csv", variant="tilelang").iloc[0]
    # gpu__time_duration.sum "373,792"; hmma 6.52; issue 36.78; dram__bytes_read.sum "95,173,376"
    assert (n.dur_us, n.tensor_pipe_pct, n.issue_active_pct) == (373.792, 6.52, 36.78)
    s0 = stage_breakdown(load(RUN / "kineto-stage0.json", variant="stage0")).set_index("stage_tag")
    assert s0.loc["fused", "total_us"] == pytest.approx(8777.968 + 8770.704 + 8775.568)
    assert s0.loc["fused", "count"] == 3 and s0.loc["host", "count"] == 39  # zero-filled outputs
