"""load(): detection, directory walks, mixed inputs, streaming of large files."""
import json
import tracemalloc
from pathlib import Path

import pytest

from mamba3_perf.errors import ParseError
from mamba3_perf.traces import detect_file, load

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize("rel, kind", [
    ("ascend/mstt/kernel_details.csv", "kernel_table"),
    ("ascend/mstt/trace_view.json", "trace_json"),
    ("kineto/triton_example.json.gz", "kineto"),
    ("h200/kineto_triton.json", "kineto"),
    ("h200/ncu_raw.csv", "ncu"),
    ("h200/ncu_details.csv", "ncu"),
    ("h200/proton_tree.hatchet", "proton_tree"),
    ("h200/proton_trace.chrome_trace", "proton_trace"),
])
def test_detect_file(rel, kind):
    assert detect_file(DATA / rel) == kind


def test_case_and_variant_fill_every_row():
    df = load(DATA / "ascend" / "mstt" / "kernel_details.csv", case_id="N128_P64_R4_C16", variant="stage0")
    assert set(df.case_id) == {"N128_P64_R4_C16"} and set(df.variant) == {"stage0"}


def test_directory_of_several_tools_or_devices_is_refused(tmp_path):
    with pytest.raises(ParseError, match="several profilers"):
        load(DATA / "h200")
    with pytest.raises(ParseError, match="mixed devices"):
        load(DATA)
    with pytest.raises(ParseError, match="no profiler output"):
        load(tmp_path)
    with pytest.raises(ParseError, match="no such file"):
        load(tmp_path / "missing.json")


def test_unknown_file_layout(tmp_path):
    f = tmp_path / "notes.csv"
    f.write_text("a,b\n1,2\n")
    with pytest.raises(ParseError, match="unknown trace layout"):
        load(f)


def _big_trace_view(path: Path, n_cpu: int, n_dev: int) -> None:
    """A torch_npu-style trace_view.json of mostly host events (generated; several MB)."""
    with open(path, "w") as f:
        f.write('[{"ph":"M","name":"process_name","pid":800,"tid":0,"args":{"name":"Ascend Hardware"}}')
        for i in range(n_cpu):
            f.write(f',{{"ph":"X","pid":1,"tid":1,"name":"aten::op_{i % 97}","ts":"{1704161511000000 + i}.125",'
                    f'"dur":0.5,"args":{{"Sequence number":{i},"Fwd thread id":0,"padding":"{"x" * 40}"}}}}')
        for i in range(n_dev):
            f.write(f',{{"ph":"X","pid":800,"tid":3,"name":"bwd_bwd_scan_kernel","ts":"{1704161512000000 + 10 * i}.500","dur":2.25}}')
        f.write("]")


def test_large_trace_is_streamed_with_bounded_memory_and_progress(tmp_path, monkeypatch):
    f = tmp_path / "trace_view.json"
    _big_trace_view(f, n_cpu=60_000, n_dev=50)
    size = f.stat().st_size
    assert size > 8 << 20

    def no_whole_file_json(*a, **k):
        raise AssertionError("the large-trace path must not json.load the whole file")

    monkeypatch.setattr(json, "load", no_whole_file_json)
    monkeypatch.setattr(json, "loads", no_whole_file_json)
    seen = []
    tracemalloc.start()
    df = load(f, progress=lambda done, total: seen.append((done, total)))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(df) == 50 and set(df.stage_tag) == {"scan"} and df.dur_us.sum() == 112.5
    assert df.start_us.tolist()[:2] == [0.0, 10.0]
    assert peak < size / 4, f"peak {peak} bytes for a {size}-byte file"
    assert len(seen) > 2 and seen[-1] == (size, size)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))


def test_an_ncu_source_page_is_pointed_to_perf_sass(tmp_path):
    import gzip

    page = (Path(__file__).parents[2] / "records" / "ncu-source-stage26-h100-68ccb02"
            / "N128_P64_R4_C16-bwd_bwd_state_terms_gluon_kernel-sass.csv.gz")
    f = tmp_path / "terms.csv"
    f.write_text(gzip.decompress(page.read_bytes()).decode())
    with pytest.raises(ParseError, match="an ncu source page .*`perf sass terms.csv`"):
        load(f)
