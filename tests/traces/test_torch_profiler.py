"""Kineto parser against real traces; expected values read by hand from the JSON."""
import gzip
import json
from pathlib import Path

import pytest

from mamba3_perf.errors import ParseError
from mamba3_perf.traces import load, parse_kineto

DATA = Path(__file__).resolve().parents[1] / "data"


def test_h200_triton_kernel():
    # {"ph":"X","cat":"kernel","name":"mm","pid":0,"tid":7,"ts":5363055384532.811,"dur":28.832,
    #  "args":{..."stream":7,"correlation":6,"registers per thread":168,"shared memory":49152,"grid":[16,16,1],"block":[128,1,1]}}
    df = parse_kineto(DATA / "h200" / "kineto_triton.json")
    assert len(df) == 1
    r = df.iloc[0]
    assert (r.kernel_name, r.device, r.stream, r.dur_us) == ("mm", "0", "7", 28.832)
    assert (r.grid, r.block, r.block_dim) == ("16,16,1", "128,1,1", 256)
    assert (r.registers_per_thread, r.smem_bytes, r.correlation) == (168, 49152, 6)
    assert r.start_us == 5363055384532.811
    assert r.start_ns == 1790857026000000000 + 5363055384532811  # baseTimeNanoseconds + ts
    assert r.stage_tag == "other" and r.source == "kineto"


def test_hta_triton_example_links_cpu_op_by_external_id():
    # kernel triton_poi_fused_add_cos_sin_0: External id 3, correlation 35, dur 1.76, 16 registers;
    # cpu_op with External id 3 is named triton_poi_fused_add_cos_sin_0
    df = parse_kineto(DATA / "kineto" / "triton_example.json.gz")
    r = df.iloc[0]
    assert (r.kernel_name, r.dur_us, r.correlation, r.registers_per_thread) == (
        "triton_poi_fused_add_cos_sin_0", 1.76, 35, 16)
    assert r.cpu_op == "triton_poi_fused_add_cos_sin_0"


def test_older_absolute_trace_with_memcpy_and_memset():
    # 79 kernels + 16 gpu_memcpy + 3 gpu_memset; first kernel: dur 73, grid [864,1,1], 47 registers
    df = parse_kineto(DATA / "kineto" / "simple_add_trace.json.gz")
    assert len(df) == 98
    assert (df.stage_tag == "host").sum() >= 19  # every memcpy/memset is host-side
    k = df[df.kernel_name.str.contains("distribution_elementwise_grid_stride_kernel")].iloc[0]
    assert (k.dur_us, k.grid, k.registers_per_thread, k.start_ns) == (73.0, "864,1,1", 47, 1694039994139246000)


def _kineto(events, **top):
    return {"schemaVersion": 1, "deviceProperties": [], **top, "traceEvents": events}


def _kernel(name, ts, dur, device=0, **args):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": device, "stream": 7, "correlation": 1, **args}}


def test_project_kernels_are_tagged_and_devices_kept_apart(tmp_path):
    f = tmp_path / "trace.json.gz"
    with gzip.open(f, "wt") as g:
        json.dump(_kineto([_kernel("bwd_bwd_pre_kernel", 1.0, 2.0), _kernel("bwd_bwd_scan_kernel", 4.0, 3.0, device=1),
                           _kernel("mamba_mimo_bwd_bwd_kernel_kernel", 9.0, 5.0),
                           _kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", 20.0, 1.0)]), g)
    df = load(f)
    assert df.stage_tag.tolist() == ["pre", "scan", "fused", "host"]
    assert df.variant.tolist()[:3] == ["prod", "prod", "tilelang"]
    assert df.device.tolist() == ["0", "1", "0", "0"]


def test_unknown_schema_version_warns(tmp_path):
    f = tmp_path / "trace.json"
    f.write_text(json.dumps({"schemaVersion": 7, "traceEvents": [_kernel("k", 1.0, 1.0)]}))
    with pytest.warns(UserWarning, match="schemaVersion 7"):
        assert len(parse_kineto(f)) == 1


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("this is not json", "not a readable JSON"),
    ('{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1}]}', "no device events"),
])
def test_bad_kineto_raises(tmp_path, text, message):
    f = tmp_path / "trace.json"
    f.write_text(text)
    with pytest.raises(ParseError, match=message) as err:
        parse_kineto(f)
    assert "\n" not in str(err.value)  # one line, without the parser's caret diagram


def test_a_trace_cut_before_its_first_event_says_so_on_one_line(tmp_path):
    f = tmp_path / "trace.json"
    f.write_text('{"schemaVersion": 1, "traceEvents": [')
    with pytest.raises(ParseError, match=r"not a readable JSON trace \(\w+: [^\n]+\)$") as err:
        parse_kineto(f)
    assert "\n" not in str(err.value)


def test_truncated_gzip_keeps_events_before_the_break(tmp_path):
    events = [_kernel(f"k{i}", float(i), 1.0) for i in range(2000)]
    blob = gzip.compress(json.dumps(_kineto(events)).encode())
    f = tmp_path / "trace.json.gz"
    f.write_bytes(blob[: len(blob) // 2])
    with pytest.warns(UserWarning, match="breaks off"):
        df = parse_kineto(f)
    assert 0 < len(df) < 2000
    assert df.kernel_name.tolist() == [f"k{i}" for i in range(len(df))]
