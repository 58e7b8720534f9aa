"""`perf profile` through typer's CliRunner on the CPU interpreter."""
from typer.testing import CliRunner

import mamba3_perf.cli.profile  # noqa: F401  (registers the command on app)
from mamba3_perf.cli import app, main
from mamba3_perf.runs import read_run

runner = CliRunner()


def test_plain_profile_on_cpu_writes_one_complete_run(tmp_path):
    res = runner.invoke(app, ["profile", "--stages", "stage0", "--out", str(tmp_path), "--name", "p1"])
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert "Triton-interpreter timings" in first and "not device timings" in first
    assert "Stage breakdown" in res.output
    run = read_run(tmp_path / "p1")
    assert run.meta["timing_kind"] == "interpreter" and run.meta["backend"] == "cpu"
    assert run.meta["case"]["N"] == 32 and run.meta["case"]["R"] == 2  # the small CPU default
    assert run.tables == ("timings", "accuracy", "events")
    t = run.table("timings")
    assert t["status"].tolist() == ["ok"] and t["median_us"].iloc[0] > 0
    ev = run.table("events")
    assert (ev["source"] == "interpreter").all() and (ev["variant"] == "stage0").all()
    assert ev["stage_tag"].tolist() == ["fused", "host"]  # the one launch, then the time outside it
    assert ev["kernel_name"].iloc[0] == "bwd_bwd_fused_kernel"
    assert (run.path / "report.md").read_text().splitlines()[0].startswith(
        "**Timings below are Triton-interpreter timings")
    for f in ("timeline.html", "report-ladder.html", "report-breakdown.html"):
        assert (run.path / f).exists(), f


def test_hopper_only_stages_are_named_where_they_run_their_parents_kernels():
    from mamba3_perf.profile import hopper_only_warning
    line = hopper_only_warning(["stage22_lkqblock", "stage23_gluonterms", "stage24_gluonaux@tf32", "tilelang"], "cpu")
    assert line.startswith("stage23_gluonterms, stage24_gluonaux@tf32: ") and "parent stage's kernels" in line
    assert hopper_only_warning(["stage0", "stage22_lkqblock"], "cpu") is None


def test_large_shape_on_cpu_is_refused_with_estimate(tmp_path, capsys):
    code = main(["profile", "--shape", "8,512,16,8", "--stages", "stage0", "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("perf: error: B8_S512_H16_G8") and "would take about" in err and "--force" in err
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def test_profile_help():
    res = runner.invoke(app, ["profile", "--help"])
    assert res.exit_code == 0 and "--hw-metrics" in res.output


def test_source_page_on_cpu_is_a_warning_and_the_run_completes(tmp_path):
    res = runner.invoke(app, ["profile", "--stages", "stage0", "--out", str(tmp_path), "--name", "p2",
                              "--source-page", "bwd_bwd_fused_kernel"])
    assert res.exit_code == 0, res.output
    assert "warning: --source-page: Nsight Compute needs CUDA; backend is cpu" in res.output
    run = read_run(tmp_path / "p2")
    assert "source_page_kernel" not in run.meta and not list((run.path / "traces").glob("sass-*"))
    assert "instructions go" not in (run.path / "report.md").read_text()
