"""`perf bench` through typer's CliRunner on the CPU interpreter."""
import json
import re

from typer.testing import CliRunner

import mamba3_perf.cli.bench  # noqa: F401  (registers the command on app)
from mamba3_perf.cli import app, main
from mamba3_perf.kernels.cases import case_sets
from mamba3_perf.runs import read_run

runner = CliRunner()


def test_bench_stores_run_and_json_record(tmp_path):
    rec = tmp_path / "records" / "rec.json"
    res = runner.invoke(app, ["bench", "--cases", "pw-1", "--stages", "stage0", "--out",
                              str(tmp_path), "--name", "b1", "--json", str(rec)])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == "note: Triton-interpreter timings (CPU), not device timings"
    assert "Ladder (vs stage0 over the cases stage0 runs" in res.output
    run = read_run(tmp_path / "b1")
    assert run.meta["timing_kind"] == "interpreter" and run.meta["stages"] == ["stage0"]
    assert run.meta["cases"][0]["id"] == "pw-1" and run.tables == ("timings", "accuracy")
    assert run.table("timings")["status"].tolist() == ["ok"]
    assert len(run.table("accuracy")) == 12
    data = json.loads(rec.read_text())
    assert set(data) == {"meta", "timings", "accuracy", "ladder", "limits"}
    lim = data["limits"][0]
    assert lim["case_id"] == "pw-1" and lim["hbm_roofline_us"] > 0 and lim["serial_bound_us"] > 0
    assert set(lim["fractions"]["stage0"]) == {"hbm", "compute", "serial", "lower_bound"}
    assert data["ladder"]["per_variant"][0]["variant"] == "stage0"
    assert not list(rec.parent.glob(".*"))  # no temporary file left beside it


def test_bench_unknown_stage_is_one_line_exit_2(tmp_path, capsys):
    assert main(["bench", "--cases", "pw-1", "--stages", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown stage 'nope'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_bench_cuda_graph_without_cuda_is_one_line_exit_2(tmp_path, capsys):
    assert main(["bench", "--cases", "pw-1", "--stages", "stage0", "--cuda-graph", "--out",
                 str(tmp_path)]) == 2
    assert "CUDA-graph timing needs the cuda backend" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_bench_help():
    res = runner.invoke(app, ["bench", "--help"], terminal_width=200)
    assert res.exit_code == 0 and "--cases" in res.output
    text = " ".join(res.output.replace("│", " ").split())
    for name in case_sets():  # the help names every case set of cases.yaml
        assert re.search(rf"[ (]{re.escape(name)}[,)]", text), name
