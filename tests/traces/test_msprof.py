"""Ascend parsers against real files; expected numbers read by hand from the CSV/JSON text."""
import math
from pathlib import Path

import pytest

from mamba3_perf.errors import ParseError
from mamba3_perf.traces import load, parse_kernel_table, parse_trace_json, read_op_statistic
from mamba3_perf.traces.schema import COLUMNS

DATA = Path(__file__).resolve().parents[1] / "data"

MSTT = DATA / "ascend" / "mstt"
MINIMAL = DATA / "ascend" / "real_cann_minimal" / "PROF_001" / "mindstudio_profiler_output"
TILELANG_OP_SUMMARY = DATA / "ascend" / "op_summary_tilelang" / "op_summary_20260605161737.csv"


def test_kernel_details_first_row_pipeutilization():
    # line 2: ...,MatMulV2,dynamic,AI_CORE,"1736413971558972.912\t",185.504,1.087,16,0,... mac 0.824, scalar 0.479, cube 79.295
    df = parse_kernel_table(MSTT / "kernel_details.csv")
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == 29
    r = df.iloc[0]
    assert r.kernel_name == "aclnnMatmul_MatMulCommon_MatMulV2"
    assert r.source == "kernel_details" and r.accelerator_core == "AI_CORE" and r.stream == "2"
    assert r.start_ns == 1736413971558972912  # exact despite the trailing tab
    assert df.start_us.min() == 0.0  # relative to the file's earliest task
    assert r.start_us == (r.start_ns - df.start_ns.min()) / 1000
    assert (r.dur_us, r.wait_us, r.block_dim, r.mix_block_dim) == (185.504, 1.087, 16, 0)
    assert (r.aic_mac_ratio, r.aic_scalar_ratio, r.aic_mte2_ratio, r.cube_utilization_pct) == (0.824, 0.479, 0.964, 79.295)
    assert set(df.accelerator_core) == {"AI_CORE", "MIX_AIC", "AI_VECTOR_CORE"}


def test_start_us_keeps_sub_microsecond_differences():
    # rows 1 and 3: 1736413971558972.912 and 1736413971565213.257 -> 6240.345 us apart exactly
    df = parse_kernel_table(MSTT / "kernel_details.csv")
    assert df.start_ns[2] - df.start_ns[0] == 6240345
    assert df.start_us[2] - df.start_us[0] == pytest.approx(6240.345, abs=1e-6)


def test_op_summary_trailing_tab_unquoted_and_na_cells():
    # "...,MIX_AIC,1780676244407387.120\t,86808.420,6958.620000,256,512,NO,N/A,..."
    df = parse_kernel_table(TILELANG_OP_SUMMARY)
    assert df.source.tolist() == ["op_summary"] * 3
    assert df.start_ns.tolist() == [1780676244313289000, 1780676244407387120, 1780676244500755880]
    assert df.start_us.tolist() == [0.0, 94098.12, 187466.88]
    r = df.iloc[1]
    assert (r.dur_us, r.wait_us, r.block_dim, r.mix_block_dim, r.device) == (86808.42, 6958.62, 256, 512, "0")
    assert (r.aic_scalar_ratio, r.aiv_scalar_ratio, r.cube_utilization_pct) == (0.944, 0.999, 0.010)


def test_op_summary_total_matches_op_statistic():
    events = parse_kernel_table(MINIMAL / "op_summary_001.csv")
    stat = read_op_statistic(MINIMAL / "op_statistic_001.csv")
    assert stat.total_us[0] == 84457.60 and stat["count"][0] == 2
    assert events.dur_us.sum() == pytest.approx(stat.total_us[0], abs=1e-6)


def test_trace_view_takes_the_ascend_hardware_process_only():
    # 276 X events in pid 800 ("Ascend Hardware"); first: ZerosLike ts "1704161511422904.204" dur 1.35 stream 3
    df = parse_trace_json(MSTT / "trace_view.json")
    assert len(df) == 276 and df.source[0] == "trace_view"
    r = df.iloc[0]
    assert (r.kernel_name, r.stream, r.dur_us, r.start_ns) == (
        "aclnnInplaceZero_ZerosLikeAiCore_ZerosLike", "3", 1.35, 1704161511422904204)
    assert r.stage_tag == "host"  # ZerosLike rule
    assert (df.kernel_name == "aclnnInplaceMuls_MulAiCore_Mul").sum() == 20


def test_msprof_json_without_metadata_warns_and_uses_task_type():
    with pytest.warns(UserWarning, match="no process_name metadata"):
        df = parse_trace_json(MINIMAL / "msprof_001.json")
    assert df.kernel_name.tolist() == ["sanitized_kernel"]  # not Runtime@DeviceSynchronize, not Computing
    assert (df.dur_us[0], df.start_ns[0], df.accelerator_core[0]) == (42399.12, 1000000000, "MIX_AIC")


def test_directory_walk_prefers_op_summary_over_json():
    df = load(DATA / "ascend" / "real_cann_minimal", case_id="c1")
    assert df.source.unique().tolist() == ["op_summary"]
    assert len(df) == 2
    assert df.case_id.unique().tolist() == ["c1"]


def test_block_num_header_and_triton_names(tmp_path):
    # 2026 header rename Block Dim -> Block Num; triton-ascend kernel name in Name and Type;
    # triton-ascend's (ratio << 16) + blockNum encoding is decoded
    text = ("Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Num,Mix Block Num\n"
            'bwd_bwd_scan_kernel,bwd_bwd_scan_kernel,MIX_AIV,"100.000\t",12.5,0,131112,40\n'
            "ZerosLike,ZerosLike,AI_VECTOR_CORE,120.500,1.5,N/A,N/A,N/A\n")
    f = tmp_path / "kernel_details.csv"
    f.write_text(text)
    df = parse_kernel_table(f)
    assert df.block_dim.tolist()[0] == 131112 & 0xFFFF == 40
    assert df.mix_block_dim[0] == 40
    assert df.stage_tag.tolist() == ["scan", "host"]
    assert df.variant[0] == "prod"
    assert df.block_dim.isna()[1] and math.isnan(df.wait_us[1])
    assert df.start_us.tolist() == [0.0, 20.5]


def test_older_arithmetic_header_has_nan_pipe_metrics(tmp_path):
    f = tmp_path / "kernel_details.csv"
    f.write_text("Step Id,Model ID,Task ID,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),"
                 "Wait Time(us),Block Dim,aicore_time(us),aic_total_cycles,aic_mac_fp16_ratio\n"
                 "1,4294967295,7,2,MatMul,MatMul,AI_CORE,1700000000000001.5,10.0,0,8,9.5,100,0.5\n")
    df = parse_kernel_table(f)
    assert df.start_ns[0] == 1700000000000001500
    assert df.aic_mac_ratio.isna().all() and df.dur_us[0] == 10.0


@pytest.mark.parametrize("content, message", [
    ("", "empty file"),
    ("Step Id,Name,Type\n1,a,b\n", "Start Time"),
    ("Name,Start Time(us),Duration(us)\nk,12.0\n", "truncated"),
    ("Name,Start Time(us),Duration(us)\nk,abc,1\n", "not a time"),
])
def test_bad_csv_raises_parse_error_naming_the_file(tmp_path, content, message):
    f = tmp_path / "kernel_details.csv"
    f.write_text(content)
    with pytest.raises(ParseError, match=message) as e:
        parse_kernel_table(f)
    assert str(f) in str(e.value)


def test_op_statistic_is_refused_as_events():
    with pytest.raises(ParseError, match="aggregate"):
        load(MINIMAL / "op_statistic_001.csv")


def test_two_hardware_processes_is_mixed_devices(tmp_path):
    f = tmp_path / "trace_view.json"
    f.write_text('[{"ph":"M","name":"process_name","pid":1,"args":{"name":"Ascend Hardware"}},'
                 '{"ph":"M","name":"process_name","pid":2,"args":{"name":"Ascend Hardware"}},'
                 '{"ph":"X","pid":1,"tid":3,"ts":"1.000","dur":1,"name":"k"}]')
    with pytest.raises(ParseError, match="mixed devices"):
        parse_trace_json(f)


def test_truncated_trace_view_keeps_events_before_the_break(tmp_path):
    text = (MSTT / "trace_view.json").read_text()
    f = tmp_path / "trace_view.json"
    f.write_text(text[: len(text) // 2])
    with pytest.warns(UserWarning, match="breaks off"):
        df = parse_trace_json(f)
    full = parse_trace_json(MSTT / "trace_view.json")
    assert 0 < len(df) < len(full)
    assert df.kernel_name.tolist() == full.kernel_name.tolist()[: len(df)]
