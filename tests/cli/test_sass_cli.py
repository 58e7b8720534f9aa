"""`perf sass`: an ncu source page (the committed H100 pages of stage26's Gluon kernels) per loop
body, per opcode and by its hottest instructions; a static nvdisasm listing (tests/data/sass) by
instruction kind, with its wgmma waits and any register-operand write before them."""
import gzip
from pathlib import Path

from mamba3_perf.cli import main

PAGE = Path(__file__).parents[2] / "records" / "ncu-source-stage26-h100-68ccb02" / "N128_P64_R4_C16-bwd_bwd_aux_gluon_kernel-sass.csv.gz"
LISTINGS = Path(__file__).parents[1] / "data" / "sass"


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


def test_sass_reads_a_static_listing(capsys):
    """The pipelined state_terms as it was (its wgmma's register operands written under them) and
    the default walk (none written)."""
    assert main(["sass", str(LISTINGS / "bwd_bwd_state_terms_gluon_kernel-stage32-pipeline-sm90.sass.gz")]) == 0
    text = " ".join(capsys.readouterr().out.split())  # titles wrap to their tables' width
    assert "instructions by kind" in text and "loop 0x3b60-0x59f0" in text
    assert "wgmma waits" in text and "181" in text
    assert "written before their wait" in text and "R84-R87" in text and "0x58e0" in text
    assert main(["sass", str(LISTINGS / "bwd_bwd_state_terms_gluon_kernel-stage32-sm90.sass.gz")]) == 0
    assert "none written before their wait" in " ".join(capsys.readouterr().out.split())
    assert main(["sass", str(LISTINGS / "bwd_bwd_chunk_sum_kernel-sm90.sass")]) == 0  # no wgmma: no wait tables
    text = capsys.readouterr().out
    assert "instructions by kind" in text and "wgmma" not in text


def test_sass_refuses_a_file_that_is_not_text(tmp_path, capsys):
    broken = tmp_path / "page.csv.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 8)  # a gzip header and nothing after it
    assert main(["sass", str(broken)]) == 2
    assert "cannot be read" in capsys.readouterr().err
