"""`perf report`, `perf compare`, `perf timeline` through typer's CliRunner."""
from typer.testing import CliRunner

import mamba3_perf.cli.reports  # noqa: F401  (registers the commands on app)
from mamba3_perf.cli import app, main
from mamba3_perf.errors import RunStoreError
from mamba3_perf.runs import create_run

from synthetic_run import timings

runner = CliRunner()


def test_help():
    for cmd in ("report", "compare", "timeline"):
        res = runner.invoke(app, [cmd, "--help"])
        assert res.exit_code == 0, res.output


def test_report_writes_record_and_charts(run_dir):
    res = runner.invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert "Triton-interpreter" in res.output and "N64_P64_R4_C16" in res.output
    md = (run_dir / "report.md").read_text()
    assert md.startswith("**Timings below are Triton-interpreter timings")
    assert "dominates" in md
    assert "Warp stalls per kernel" in res.output and "long_sb 50.0%" in res.output
    assert "stall most on long_scoreboard (4.50 of the 9.00 cycles" in md
    assert "DRAM traffic per kernel" in res.output and "all kernels" in res.output
    assert "move 0.0473 GB (ncu): 11 µs at NVIDIA H200's 4.3 TB/s" in md and "take 1.36x that (15 µs)" in md
    assert (run_dir / "report-ladder.html").exists() and (run_dir / "report-breakdown.html").exists()


def test_report_custom_out(run_dir, tmp_path):
    out = tmp_path / "sub" / "rec.md"
    res = runner.invoke(app, ["report", str(run_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.exists() and (tmp_path / "sub" / "rec-ladder.html").exists()


def test_compare(run_dir, tmp_path):
    with create_run(tmp_path, "r2", {"timing_kind": "interpreter"}) as w:
        w.write_table("timings", timings(scale=2.0))
    res = runner.invoke(app, ["compare", str(run_dir), str(tmp_path / "r2")])
    assert res.exit_code == 0, res.output
    assert "slower" in res.output and "changed beyond the spread" in res.output


def test_timeline(run_dir, tmp_path):
    res = runner.invoke(app, ["timeline", str(run_dir), "--out", str(tmp_path / "tl.html")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "tl.html").stat().st_size > 1_000_000  # plotly.js inlined


def test_errors_are_one_line_exit_2(tmp_path, run_dir, capsys):
    res = runner.invoke(app, ["report", str(tmp_path / "missing")])
    assert isinstance(res.exception, RunStoreError)
    assert main(["timeline", str(tmp_path / "missing")]) == 2
    assert "perf: error:" in capsys.readouterr().err
    with create_run(tmp_path, "noev", {"timing_kind": "device"}) as w:
        w.write_table("timings", timings("device"))
    assert main(["timeline", str(tmp_path / "noev")]) == 2
