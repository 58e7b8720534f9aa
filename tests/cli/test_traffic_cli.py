"""`perf traffic` through the CLI entry point on the CPU interpreter."""
import json
import os

import pytest

from mamba3_perf.cli import main

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="counts through the Triton interpreter")


def test_traffic_prints_per_kernel_bytes_and_writes_rows(tmp_path, capsys):
    out = tmp_path / "t" / "traffic.json"
    assert main(["traffic", "--case", "small-N128_P64_R4_C16", "--stage", "stage25_subchunk", "--samples", "2",
                 "--tensors",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("counted on the Triton interpreter")
    assert "stage25_subchunk on small-N128_P64_R4_C16" in text and "bwd_bwd_pre_halves_kernel" in text
    assert "QR_S" in text  # --tensors
    data = json.loads(out.read_text())
    assert data["stage"] == "stage25_subchunk" and data["samples"] == 2 and data["knobs"] == []
    assert data["meta"]["command"] and "git_commit" in data["meta"]
    assert data["meta"]["versions"]["triton"]
    assert {r["tensor"] for r in data["rows"]} >= {"QR_S", "KR_S", "DST_S"}
    assert not list(out.parent.glob(".*"))  # written atomically, nothing left beside it


@pytest.mark.parametrize("args,message", [
    (["--knob", "stage25_subchunk.PRE_HEADS_INNER=0,1"], "one value"),
    (["--device", "tpu"], "expected h200 or 910b"),
    (["--stage", "nope"], "unknown stage 'nope'"),
    (["--samples", "0"], "--samples"),
])
def test_traffic_bad_options_exit_2(capsys, args, message):
    assert main(["traffic", "--case", "pw-1", *args]) == 2
    assert message in capsys.readouterr().err


def test_traffic_sets_a_recorded_ncu_page_beside_the_counts(capsys):
    """stage17's Nsight Compute page of N128_P64_R4_C16 (H200): its times and DRAM bytes join the
    small case's counts by kernel name (the numbers differ by case; the columns are what is checked)."""
    from pathlib import Path

    page = Path(__file__).parents[2] / "records" / "ncu-N128_P64_R4_C16" / "stage17_scanpass-stalls-raw.csv"
    assert main(["traffic", "--case", "small-N128_P64_R4_C16", "--stage", "stage17_scanpass", "--samples", "2",
                 "--measured", str(page)]) == 0
    text = capsys.readouterr().out
    assert "measured us" in text and "TB/s" in text and "DRAM MB" in text
    assert "1390.3" in text  # the aux's duration on the H200's page


def test_traffic_refuses_a_corrupt_trace_before_counting(tmp_path, capsys):
    bad = tmp_path / "trace.json"
    bad.write_text('{"traceEvents": [')
    assert main(["traffic", "--case", "pw-1", "--measured", str(bad)]) == 2
    captured = capsys.readouterr()
    assert "trace.json" in captured.err and "counted on" not in captured.out
