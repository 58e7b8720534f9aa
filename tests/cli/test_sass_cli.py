"""`perf sass`: an ncu source page (the committed H100 pages of stage26's Gluon kernels) per loop
body, per opcode and by its hottest instructions."""
import gzip
from pathlib import Path

from mamba3_perf.cli import main

PAGE = Path(__file__).parents[2] / "records" / "ncu-source-stage26-h100-68ccb02" / "N128_P64_R4_C16-bwd_bwd_aux_gluon_kernel-sass.csv.gz"


def test_sass_prints_regions_opcodes_and_hot_instructions(capsys):
    assert main(["sass", str(PAGE), "--rows", "8"]) == 0
    text = capsys.readouterr().out
    assert "by region" in text and "loop 0xda50-0x101a0" in text and "630" in text  # the second N walk
    assert "by opcode" in text and "HGMMA" in text and "R2UR" in text  # 7th by samples
    assert "most stall samples" in text and "0x046c0" in text  # the first walk's mbarrier wait, 6.1 %
    assert "6.1%" in text


def test_sass_refuses_what_is_not_a_source_page(tmp_path, capsys):
    assert main(["sass", str(tmp_path / "missing.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    other = tmp_path / "raw.csv"
    other.write_text('"ID","Kernel Name","gpu__time_duration.sum"\n"0","k","1"\n')
    assert main(["sass", str(other)]) == 2
    assert "not an ncu source page" in capsys.readouterr().err
    cut = tmp_path / "cut.csv"
    cut.write_text(gzip.decompress(PAGE.read_bytes()).decode()[:5000])
    assert main(["sass", str(cut)]) == 2
    assert "cut off" in capsys.readouterr().err
