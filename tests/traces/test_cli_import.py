"""perf import through typer's CliRunner."""
from pathlib import Path

import pytest

from typer.testing import CliRunner

import mamba3_perf.cli.traces  # noqa: F401  (registers `import` on the app)
from mamba3_perf.cli import app
from mamba3_perf.runs import read_run

DATA = Path(__file__).resolve().parents[1] / "data"


def test_import_prints_breakdown_and_stores_events(tmp_path):
    res = CliRunner().invoke(app, ["import", str(DATA / "ascend" / "mstt" / "trace_view.json"),
                                   "--case", "c1", "--stage", "stage0", "--out", str(tmp_path), "--name", "tv"])
    assert res.exit_code == 0, res.output
    assert "Stage breakdown" in res.output and "host" in res.output and "276 events" in res.output
    events = read_run(tmp_path / "tv").table("events")
    assert len(events) == 276 and set(events.case_id) == {"c1"} and set(events.variant) == {"stage0"}


def test_import_help_and_bad_input(tmp_path):
    runner = CliRunner()
    assert runner.invoke(app, ["import", "--help"]).exit_code == 0
    bad = tmp_path / "x.json"
    bad.write_text("")
    res = runner.invoke(app, ["import", str(bad)])
    assert res.exit_code != 0 and "empty" in str(res.exception)


def test_import_of_an_ncu_stall_capture_prints_the_stall_table():
    rec = Path(__file__).resolve().parents[2] / "records" / "ncu-N128_P64_R4_C16" / "stage16_regcap-stalls-raw.csv"
    res = CliRunner().invoke(app, ["import", str(rec), "--stage", "stage16_regcap"])
    assert res.exit_code == 0, res.output
    assert "Stage breakdown" in res.output and "Warp stalls per kernel" in res.output
    assert "long_sb" in res.output


RECORDS = Path(__file__).resolve().parents[2] / "records"


@pytest.mark.parametrize("page,expected", [
    ("ncu-N128_P64_R4_C16/stage17_scanpass-stalls-raw.csv",  # each kernel's DRAM floor
     ["DRAM traffic per kernel (floor: the bytes at NVIDIA H200's 4.3 TB/s)", "all kernels", "6.137", "2.72x"]),
    ("ncu-stage26-4fc1088/N64_P128_R4_C16-raw.csv",  # each kernel's occupancy and its limiter
     ["Occupancy per kernel (NVIDIA H200: 64 warps, 64K registers, 228 KiB shared memory per SM)",
      "shared_mem", "registers", "62.06"]),
])
def test_import_of_an_ncu_page_prints_per_kernel_tables(page, expected):
    res = CliRunner(env={"COLUMNS": "220"}).invoke(app, ["import", str(RECORDS / page)])
    assert res.exit_code == 0, res.output
    for text in expected:
        assert text in res.output, text
