from typer.testing import CliRunner

from mamba3_perf.cli import app, main

runner = CliRunner()


def test_check_passes_and_prints_all_gradients():
    res = runner.invoke(app, ["check", "--shape", "1,32,2,1", "--n", "16", "--p", "16", "--rank", "2"])
    assert res.exit_code == 0, res.output
    for g in ("DQ", "DK", "DV", "DMIMO_V", "DANGLES", "DFACTOR", "DGAMMA", "DDA", "DSSDA", "DDA_CS_REV", "DDA_CS", "DD"):
        assert g in res.output
    assert "FAIL" not in res.output


def test_check_tail_case():
    res = runner.invoke(app, ["check", "--case", "tail-33"])
    assert res.exit_code == 0, res.output


def test_bad_shape_is_one_line_and_exit_2(capsys):
    assert main(["check", "--shape", "1,32,2"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "perf: error: --shape must be B,S,H,G (four integers), got '1,32,2'"


def test_help_lists_commands():
    res = runner.invoke(app, ["--help"])
    assert res.exit_code == 0 and "check" in res.output and "stages" in res.output
