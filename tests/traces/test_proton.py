"""proton parsers and the ablation split."""
import json
from pathlib import Path

import pandas as pd
import pytest

from mamba3_perf.errors import ParseError
from mamba3_perf.traces import load, parse_proton_trace, parse_proton_tree, region_split_from_ablation

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"


def test_hatchet_tree():
    # ROOT -> mm: count 1, device_id "0", time (ns) 28319
    df = parse_proton_tree(H200 / "proton_tree.hatchet")
    assert len(df) == 1
    r = df.iloc[0]
    assert (r.kernel_name, r.device, r.dur_us, r.calls, r.source) == ("mm", "0", 28.319, 1, "proton")
    assert pd.isna(r.region) and r.start_kind == "serialized"


def test_cupti_chrome_trace():
    # {"args":{"call_stack":["ROOT","mm"]},"cat":"kernel","dur":28.544,"name":"mm","ph":"X","tid":7,"ts":0.0}
    r = load(H200 / "proton_trace.chrome_trace").iloc[0]
    assert (r.kernel_name, r.stream, r.dur_us, r.start_us) == ("mm", "7", 28.544, 0.0)


def _instrumentation_trace(path):
    # layout from FORMATS.md §6 (no public sample found): pid "<kernel> Core<n> CTA<id>", tid "warp <w>",
    # name = scope, ts/dur in cycles/1000
    ev = []
    for cta in (0, 1):
        pid = f"bwd_bwd_fused_kernel Core{cta} CTA{cta}"
        ev += [{"ph": "X", "cat": "bwd_bwd_fused_kernel", "pid": pid, "tid": "warp 0", "name": "scan", "ts": 0.0, "dur": 1.98},
               {"ph": "X", "cat": "bwd_bwd_fused_kernel", "pid": pid, "tid": "warp 0", "name": "post", "ts": 1.98, "dur": 0.99}]
    path.write_text(json.dumps({"displayTimeUnit": "us", "traceEvents": ev}))


def test_instrumentation_trace_regions_with_clock(tmp_path):
    f = tmp_path / "regions.chrome_trace"
    _instrumentation_trace(f)
    df = parse_proton_trace(f, clock_khz=1_980_000)  # 1.98 GHz: 1980 cycles = 1 us
    assert df.region.tolist() == ["scan", "post", "scan", "post"]
    assert df.dur_us.tolist() == pytest.approx([1.0, 0.5, 1.0, 0.5])
    assert df.start_us.tolist() == pytest.approx([0.0, 1.0, 0.0, 1.0])
    assert set(df.kernel_name) == {"bwd_bwd_fused_kernel"} and set(df.stage_tag) == {"fused"}


def test_instrumentation_trace_takes_clock_from_sibling_hatchet(tmp_path):
    f = tmp_path / "regions.chrome_trace"
    _instrumentation_trace(f)
    with pytest.raises(ParseError, match="clock_khz"):
        parse_proton_trace(f)
    (tmp_path / "run.hatchet").write_text((H200 / "proton_tree.hatchet").read_text())  # clock_rate 1980000
    assert parse_proton_trace(f).dur_us.tolist()[:2] == pytest.approx([1.0, 0.5])


def test_bad_hatchet(tmp_path):
    f = tmp_path / "x.hatchet"
    f.write_text("[1, 2")
    with pytest.raises(ParseError, match="not valid JSON"):
        parse_proton_tree(f)


def test_ablation_split():
    df = region_split_from_ablation(100.0, {"scan": 60.0, "aux": 85.0})
    assert df.region.tolist() == ["scan", "aux", "other"]
    assert df.dur_us.tolist() == [40.0, 15.0, 45.0]
    assert set(df.source) == {"ablation"} and set(df.stage_tag) == {"fused"}


@pytest.mark.parametrize("variants, message", [
    ({"scan": 110.0}, "slower"),
    ({"scan": 40.0, "aux": 40.0}, "not additive"),
    ({"scan": -1.0}, "positive"),
    ({"other": 50.0}, "reserved"),
])
def test_ablation_rejects_inconsistent_timings(variants, message):
    with pytest.raises(ParseError, match=message):
        region_split_from_ablation(100.0, variants)
