"""analysis.occupancy: the CUDA residency rules against Nsight Compute's own limits on every launch
of the raw pages in records/, by hand on launches worked out on paper, and per kernel on a trace."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mamba3_perf.analysis.limits import ASCEND_910B, H200, device_for
from mamba3_perf.analysis.occupancy import LIMITERS, kernel_occupancy, next_block, occupancy
from mamba3_perf.reports.console import occupancy_table
from mamba3_perf.traces import load

RECORDS = Path(__file__).resolve().parents[2] / "records"


def _raw_pages():
    """(path, DataFrame) of every ncu raw page in records/ (header row, units row, launches)."""
    pages = []
    for path in sorted(RECORDS.glob("**/*raw*.csv")):
        lines = path.read_text().splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
        df = pd.read_csv(path, skiprows=start, dtype=str)
        pages.append((path, df.iloc[1:]))  # the first row holds the units
    return pages


def _num(v) -> float:
    return float(str(v).replace(",", ""))


def test_blocks_per_sm_equal_ncus_on_every_recorded_launch():
    pages = _raw_pages()
    assert len(pages) >= 8  # stage16-18 and TileLang on N128_P64_R4_C16, stage26 on four shapes
    n = 0
    for path, df in pages:
        for _, r in df.iterrows():
            smem = _num(r["launch__shared_mem_per_block_static"]) + _num(r["launch__shared_mem_per_block_dynamic"])
            occ = occupancy(int(_num(r["launch__registers_per_thread"])), int(_num(r["launch__block_size"])),
                            int(smem), device=H200)
            ncu = {k: int(_num(r[f"launch__occupancy_limit_{k}"])) for k in LIMITERS}
            where = f"{path.name}: {r['Kernel Name']}"
            assert occ.blocks_per_sm == min(ncu.values()), where
            assert occ.limits["registers"] == ncu["registers"] and occ.limits["warps"] == ncu["warps"], where
            # the driver's carveout can only lower ncu's shared-memory limit, never below the blocks
            assert occ.limits["shared_mem"] >= ncu["shared_mem"] >= occ.blocks_per_sm, where
            assert occ.theoretical_pct == pytest.approx(_num(r["sm__maximum_warps_per_active_cycle_pct"]), abs=0.01)
            n += 1
    assert n >= 40


def test_by_hand():
    # 255 registers: a warp takes 255 x 32 = 8160 -> 8192; 4 warps 32768; 65536 // 32768 = 2
    aux = occupancy(255, 128, 102416, grid_blocks=8192)
    assert (aux.blocks_per_sm, aux.limiter, aux.warps_per_sm) == (2, "registers", 8)
    assert aux.limits["shared_mem"] == 2  # (102416 + 1024) -> 103424 B: 233472 // 103424
    assert aux.theoretical_pct == 12.5 and aux.waves == pytest.approx(8192 / (132 * 2))
    # 156 KiB of shared memory: one program per SM, though the registers would allow two
    wide = occupancy(255, 128, 159760)
    assert (wide.blocks_per_sm, wide.limiter) == (1, "shared_mem") and np.isnan(wide.waves)
    # 56 registers: 1792 per warp, 7168 a block: 9 blocks, 36 warps
    assert occupancy(56, 128, 4096).warps_per_sm == 36
    # 32 registers, 4 warps: registers and warps both allow 16 blocks: a full SM, named "warps"
    full = occupancy(32, 128)
    assert (full.blocks_per_sm, full.limiter, full.theoretical_pct) == (16, "warps", 100.0)
    # one warp of few registers: the 32-block limit
    assert occupancy(16, 32).limiter == "blocks"


def test_bad_input():
    with pytest.raises(ValueError, match="GPU only"):
        occupancy(64, 128, device=ASCEND_910B)
    with pytest.raises(ValueError, match="bad launch"):
        occupancy(64, 0)
    with pytest.raises(ValueError, match="bad launch"):
        occupancy(64, 128, -1)


def test_per_kernel_on_a_recorded_page():
    events = load(RECORDS / "ncu-stage26-4fc1088" / "N64_P128_R4_C16-raw.csv", case_id="N64_P128_R4_C16",
                  variant="stage26_widep")
    occ = kernel_occupancy(events, H200)
    assert occ["total_us"].is_monotonic_decreasing and len(occ) == events["kernel_name"].nunique()
    aux = occ[occ.kernel_name == "bwd_bwd_aux_gluon_kernel"].iloc[0]
    assert (aux.blocks_per_sm, aux.limiter, aux.theoretical_pct) == (1, "shared_mem", 6.25)
    # measured warps never above the theory (ncu's achieved occupancy), and the short grid of
    # the scan (0.39 waves) is what holds it far below
    assert (occ["warps_active_pct"] <= occ["theoretical_pct"] + 0.5).all()
    scan = occ[occ.kernel_name == "bwd_bwd_pass_scan_kernel"].iloc[0]
    assert scan.waves < 1 and scan.warps_active_pct < scan.theoretical_pct / 2
    text = occupancy_table(occ, device=H200)
    assert "Occupancy per kernel" in text and "shared_mem" in text and "6.2%" in text


def test_profile_runs_count_one_profiler_and_npu_runs_have_none():
    events = load(RECORDS / "ncu-stage26-4fc1088" / "N128_P64_R4_C16-raw.csv", case_id="c", variant="v")
    kineto = events.assign(source="kineto", warps_active_pct=np.nan)
    occ = kernel_occupancy(pd.concat([kineto, events], ignore_index=True), H200)
    alone = kernel_occupancy(events, H200)
    pd.testing.assert_frame_equal(occ, alone)  # ncu's rows, not the sum of both profilers' times
    assert kernel_occupancy(events, ASCEND_910B).empty
    assert kernel_occupancy(events.drop(columns=["block"]), H200).empty
    assert occupancy_table(kernel_occupancy(events.iloc[:0], H200), device=H200) == ""


@pytest.mark.parametrize("launch,needs", [
    ((183, 128, 77840), (168, 76800)),  # state_terms at P = 64: two per SM, a third at 168 registers and 75 KiB
    ((141, 128, 47120), (128, 57344)),  # at P = 32: three (registers), a fourth at 128
    ((251, 128, 139280), (255, 115712)),  # at P = 128: one (shared memory); registers never stop a second
    ((47, 1024, 0), (32, 115712)),  # one block of 32 warps (registers): a second fits the warps
    ((32, 1024, 0), (None, None)),  # two blocks of 32 warps fill the SM's 64: no third whatever the resources
])
def test_what_one_more_block_per_sm_needs(launch, needs):
    assert next_block(*launch, device=H200) == needs
    regs, smem = needs
    if regs is not None:  # and at those figures the SM holds exactly one more
        before = occupancy(*launch, device=H200).blocks_per_sm
        assert occupancy(regs, launch[1], smem, device=H200).blocks_per_sm == before + 1
        assert occupancy(regs + 8, launch[1], smem, device=H200).blocks_per_sm == before \
            or occupancy(regs, launch[1], smem + 128, device=H200).blocks_per_sm == before


def test_the_table_says_what_one_more_block_needs():
    events = load(RECORDS / "ncu-stage26-4fc1088" / "N128_P64_R4_C16-raw.csv", case_id="c", variant="v")
    occ = kernel_occupancy(events, H200)
    terms = occ[occ.kernel_name == "bwd_bwd_state_terms_gluon_kernel"].iloc[0]
    assert (terms.blocks_per_sm, terms.next_registers) == (2, 168)
    text = occupancy_table(occ, device=H200)
    assert "+1 block:" in text and "168 / 75.0" in text


def test_sms_busy_spreads_a_grid_under_one_wave_one_block_per_sm():
    h100 = device_for("NVIDIA H100 80GB HBM3")
    assert h100.sm_count == 132
    # TileLang: 64 programs of 256 threads at 255 registers, one per SM
    assert occupancy(255, 256, 0, 64, h100).sms_busy == 64
    # 64 programs that could share 4 SMs (16 blocks an SM) still take 64
    small = occupancy(32, 128, 0, 64, h100)
    assert small.blocks_per_sm == 16 and small.sms_busy == 64
    assert occupancy(218, 128, 34 * 1024, 8192, h100).sms_busy == 132
    two = occupancy(255, 128, 100 * 1024, 256, h100)  # 256 programs at two per SM: every SM
    assert two.blocks_per_sm == 2 and two.waves < 1 and two.sms_busy == 132
    assert np.isnan(occupancy(255, 128).sms_busy)  # no grid
