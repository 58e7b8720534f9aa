"""ncu CSV parser against the H200 files; values read by hand from the CSVs."""
from pathlib import Path

import pytest

from mamba3_perf.errors import ParseError
from mamba3_perf.traces import load, parse_ncu

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"


def test_raw_page():
    # gpu__time_duration.sum ns "30,848"; tensor hmma avg 66.08; alu 7.49; issue 20.81; dram thr 11.37;
    # warps active 11.98; dram__bytes_read.sum "16,788,736"; launch__grid_size 256; registers 168;
    # shared_mem static 0 + dynamic "49,152"
    r = parse_ncu(H200 / "ncu_raw.csv").iloc[0]
    assert (r.kernel_name, r.device, r.stream, r.grid, r.block) == ("mm", "0", "7", "16,16,1", "128,1,1")
    assert r.dur_us == 30.848
    assert (r.tensor_pipe_pct, r.alu_pipe_pct, r.issue_active_pct) == (66.08, 7.49, 20.81)
    assert (r.dram_throughput_pct, r.warps_active_pct, r.dram_bytes) == (11.37, 11.98, 16788736.0)
    assert (r.block_dim, r.registers_per_thread, r.smem_bytes) == (256, 168, 49152)
    assert (r.source, r.start_us, r.start_kind) == ("ncu", 0.0, "serialized")


def test_metrics_page():
    # dram__bytes_read.sum "16,788,992"; gpu__time_duration.sum "30,752"; hmma 66.45; alu 7.53; issue 20.93
    r = parse_ncu(H200 / "ncu_metrics.csv").iloc[0]
    assert (r.dur_us, r.dram_bytes, r.tensor_pipe_pct, r.alu_pipe_pct, r.issue_active_pct) == (
        30.752, 16788992.0, 66.45, 7.53, 20.93)
    assert (r.dram_throughput_pct, r.warps_active_pct) == (11.40, 11.96)


def test_details_page_display_names():
    # Duration ns "30,208"; DRAM Throughput 11.66; One or More Eligible 21.40; Achieved Occupancy 11.96
    r = load(H200 / "ncu_details.csv").iloc[0]
    assert (r.dur_us, r.dram_throughput_pct, r.issue_active_pct, r.warps_active_pct) == (30.208, 11.66, 21.40, 11.96)
    assert r.block_dim == 256  # from Grid Size (16, 16, 1)
    assert r.tensor_pipe_pct != r.tensor_pipe_pct  # not on the details page: NaN


def test_instructions_from_a_details_page():
    """Executed warp instructions = Executed Ipc Active x SM Active Cycles x # SMs on a details
    page (records/ncu-N128_P64_R4_C16: TileLang 1.58 x 1,675,976.39 x 132; stage12's state pass
    2.01 x 1,205,532.67 x 132); a page without the IPC (the fixture) leaves it NaN."""
    rec = Path(__file__).resolve().parents[2] / "records" / "ncu-N128_P64_R4_C16"
    tl = parse_ncu(rec / "tilelang-details.csv").iloc[0]
    assert tl.instructions == pytest.approx(1.58 * 1675976.39 * 132)
    s12 = parse_ncu(rec / "stage12_pipeaux-details.csv").set_index("kernel_name")
    assert s12.loc["bwd_bwd_state_pass_kernel", "instructions"] == pytest.approx(2.01 * 1205532.67 * 132)
    assert s12["instructions"].notna().all() and len(s12) == 6
    assert load(H200 / "ncu_details.csv")["instructions"].isna().all()


def test_instructions_metric_wins_over_the_product(tmp_path):
    head = '"ID","Kernel Name","Stream","Metric Name","Metric Unit","Metric Value"\n'
    rows = ['"0","k","7","gpu__time_duration.sum","usecond","2"',
            '"0","k","7","Executed Ipc Active","inst/cycle","2"',
            '"0","k","7","SM Active Cycles","cycle","10"',
            '"0","k","7","# SMs","SM","132"',
            '"0","k","7","smsp__inst_executed.sum","inst","1,234"']
    f = tmp_path / "ncu.csv"
    f.write_text(head + "\n".join(rows) + "\n")
    assert parse_ncu(f).instructions.tolist() == [1234.0]
    f.write_text(head + "\n".join(rows[:-1]) + "\n")
    assert parse_ncu(f).instructions.tolist() == [2 * 10 * 132.0]


def test_several_launches_serialized_in_id_order(tmp_path):
    head = '"ID","Kernel Name","Stream","Metric Name","Metric Unit","Metric Value"\n'
    f = tmp_path / "ncu.csv"
    f.write_text("==PROF== Connected\n" + head +
                 '"1","bwd_bwd_scan_kernel","7","gpu__time_duration.sum","usecond","2.5"\n'
                 '"0","bwd_bwd_pre_kernel","7","gpu__time_duration.sum","msecond","0.001"\n')
    df = parse_ncu(f)
    assert df.kernel_name.tolist() == ["bwd_bwd_pre_kernel", "bwd_bwd_scan_kernel"]
    assert df.dur_us.tolist() == [1.0, 2.5] and df.start_us.tolist() == [0.0, 1.0]
    assert df.stage_tag.tolist() == ["pre", "scan"] and df.device.tolist() == ["cuda", "cuda"]


@pytest.mark.parametrize("text, message", [
    ("==PROF== Connected to process 1\n==PROF== Disconnected\n", "no ncu CSV lines"),
    ('"a","b"\n"1","2"\n', "no 'ID' column"),
    ('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n"0","k","sm__x","%","1"\n', "no duration metric"),
    ('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n"0","k","Duration","ns","fast"\n', "not a number"),
])
def test_bad_ncu_raises(tmp_path, text, message):
    f = tmp_path / "ncu.csv"
    f.write_text(text)
    with pytest.raises(ParseError, match=message):
        parse_ncu(f)


def test_warp_stalls_from_a_raw_page():
    """The WarpStateStats raw page of stage16 on N128_P64_R4_C16 (records/ncu-N128_P64_R4_C16/
    stage16_regcap-stalls-raw.csv), values read from the file: state_terms 10.91 cycles per
    issued instruction, 5.10 of them long scoreboard, 1.75 barrier; chunk_sum 20.11 / 18.16."""
    rec = Path(__file__).resolve().parents[2] / "records" / "ncu-N128_P64_R4_C16"
    df = parse_ncu(rec / "stage16_regcap-stalls-raw.csv").set_index("kernel_name")
    terms = df.loc["bwd_bwd_state_terms_kernel"]
    assert (terms.cycles_per_issue, terms.stall_long_scoreboard, terms.stall_barrier) == (10.91, 5.10, 1.75)
    assert (terms.stall_short_scoreboard, terms.stall_mio_throttle, terms.stall_wait) == (0.92, 0.66, 1.10)
    chunk = df.loc["bwd_bwd_chunk_sum_kernel"]
    assert (chunk.cycles_per_issue, chunk.stall_long_scoreboard, chunk.stall_barrier) == (20.11, 18.16, 0.0)
    stalls = df[[c for c in df.columns if c.startswith("stall_")]]
    assert stalls.notna().all().all() and (stalls.sum(axis=1) <= df.cycles_per_issue).all()


def test_cycles_per_issue_from_a_details_page():
    # Warp Cycles Per Issued Instruction: pre 8.11, aux 7.84 (stage15's details page); no stall split there
    rec = Path(__file__).resolve().parents[2] / "records" / "ncu-N128_P64_R4_C16"
    df = parse_ncu(rec / "stage15_passwave-details.csv").set_index("kernel_name")
    assert df.loc["bwd_bwd_pre_steptrig_kernel", "cycles_per_issue"] == 8.11
    assert df.loc["bwd_bwd_aux_streamed_kernel", "cycles_per_issue"] == 7.84
    assert df["stall_long_scoreboard"].isna().all()
