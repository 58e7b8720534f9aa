"""The static SASS instruction mix, read from a real nvdisasm listing of one of our kernels
(tests/data/sass: the chunk-sum kernel for sm_90, Triton 3.6)."""
from pathlib import Path

import pytest

from mamba3_perf.analysis.sass import KIND_ORDER, instruction_mix, kind, loop_spans, parse_sass

LISTING = (Path(__file__).parents[1] / "data" / "sass" / "bwd_bwd_chunk_sum_kernel-sm90.sass").read_text()


def test_parses_every_instruction_and_resolves_branch_targets():
    df = parse_sass(LISTING)
    # the listing's addresses run 0x0000 .. in steps of 16 bytes, one instruction each
    assert df["addr"].iloc[0] == 0 and (df["addr"].diff().dropna() == 16).all()
    assert df.loc[df["addr"] == 0x00F0, "opcode"].item() == "BRA"  # "@!P0 BRA `(.L_x_0)"
    assert df.loc[df["addr"] == 0x0940, "target"].item() == 0x0560  # .L_x_3, the label before 0x0560
    # BSSY names its reconvergence label too
    assert set(df.loc[df["target"] >= 0, "opcode"]) == {"BRA", "BSSY"}


def test_the_chunk_loop_is_found_and_counted():
    df = parse_sass(LISTING)
    # the chunk walk unrolled by four, then its remainder loop; the closing BRA-to-self is no loop
    assert loop_spans(df) == [(0x0560, 0x0940), (0x0C20, 0x0D60)]
    mix = instruction_mix(LISTING).set_index("region")
    loop = mix.loc["loop 0x560-0x940"]
    assert loop["instructions"] == (0x0940 - 0x0560) // 16 + 1
    assert loop["global"] > 0 and loop["float"] > 0 and loop["local"] == 0  # loads, adds, no spills
    assert mix.loc["kernel", "instructions"] == len(df)
    assert mix[list(KIND_ORDER)].sum(axis=1).equals(mix["instructions"])


@pytest.mark.parametrize("opcode, want", [("IMAD.WIDE.U32", "int"), ("ULDC.64", "int"), ("UIADD3", "int"),
                                          ("HGMMA.64x16x8.F32.TF32", "mma"), ("LDGSTS.E.BYPASS.128", "global"),
                                          ("LDL.LU", "local"), ("SHFL.BFLY", "shuffle"), ("FSETP.GEU.AND", "float"),
                                          ("BAR.SYNC.DEFER_BLOCKING", "control"), ("XYZ", "other")])
def test_kinds(opcode, want):
    assert kind(opcode) == want


def test_text_without_instructions_is_refused():
    with pytest.raises(ValueError, match="nvdisasm"):
        parse_sass("//--- not a listing\n.text.foo:\n")
