"""`perf traffic` through the CLI entry point on the CPU interpreter."""
import json
import os

import pytest

from mamba3_perf.cli import main

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="counts through the Triton interpreter")


def test_traffic_prints_per_kernel_bytes_and_writes_rows(tmp_path, capsys):
    out = tmp_path / "t" / "traffic.json"
    assert main(["traffic", "--case", "small-N128_P64_R4_C16", "--samples", "2", "--tensors",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("counted on the Triton interpreter")
    assert "stage25_subchunk on small-N128_P64_R4_C16" in text and "bwd_bwd_pre_halves_kernel" in text
    assert "QR_S" in text  # --tensors
    data = json.loads(out.read_text())
    assert data["stage"] == "stage25_subchunk" and data["samples"] == 2 and data["knobs"] == []
    assert {r["tensor"] for r in data["rows"]} >= {"QR_S", "KR_S", "DST_S"}
    assert not list(out.parent.glob(".*"))  # written atomically, nothing left beside it


@pytest.mark.parametrize("args,message", [
    (["--knob", "stage25_subchunk.PRE_HEADS_INNER=0,1"], "one value"),
    (["--device", "tpu"], "expected h200 or 910b"),
    (["--stage", "nope"], "unknown stage 'nope'"),
])
def test_traffic_bad_options_exit_2(capsys, args, message):
    assert main(["traffic", "--case", "pw-1", *args]) == 2
    assert message in capsys.readouterr().err
