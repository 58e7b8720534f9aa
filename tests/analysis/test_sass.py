"""The static SASS instruction mix, read from a real nvdisasm listing of one of our kernels
(tests/data/sass: the chunk-sum kernel for sm_90, Triton 3.6), and the measured one, from real
Nsight Compute source pages."""
import gzip
from pathlib import Path

import pandas as pd
import pytest

from mamba3_perf.analysis.sass import (
    KIND_ORDER, instruction_mix, kind, loop_spans, measured_mix, measured_regions, mma_register_hazards, mma_waits,
    parse_sass, read_source_page, written_registers,
)
from mamba3_perf.errors import ParseError

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
                                          ("HGMMA.64x16x8.F32.TF32", "mma"), ("R2UR", "move"), ("UMOV", "move"), ("MOV", "move"), ("LDGSTS.E.BYPASS.128", "global"),
                                          ("LDL.LU", "local"), ("SHFL.BFLY", "shuffle"), ("FSETP.GEU.AND", "float"),
                                          ("BAR.SYNC.DEFER_BLOCKING", "control"), ("XYZ", "other")])
def test_kinds(opcode, want):
    assert kind(opcode) == want


def _listing(name):
    return gzip.decompress((Path(__file__).parents[1] / "data" / "sass" / name).read_bytes()).decode()


def test_mma_waits_of_a_walk_that_waits_at_once():
    """stage32's state_terms (N128_P64_R4_C16): each N step issues its 30 HGMMA (dK_raw and ks
    dstates at tf32x3) and waits for them three instructions later."""
    text = _listing("bwd_bwd_state_terms_gluon_kernel-stage32-sm90.sass.gz")
    waits = mma_waits(text)
    assert len(waits) == 1
    w = waits.iloc[0]
    assert w["issued"] == 30 and w["overlap"] == 3
    assert w["loop"] and parse_sass(text)["opcode"].str.startswith("HGMMA").sum() == 30


def test_mma_waits_of_a_software_pipelined_walk():
    """The same kernel with terms_gluon.PIPELINE: the loop body waits before it issues (the step
    issued in the iteration before), so the wait's HGMMA are those after it in the body and the
    overlap runs around the back edge: the next step's staging, 181 instructions; the last step's
    wait after the loop overlaps only its own tail."""
    text = _listing("bwd_bwd_state_terms_gluon_kernel-stage32-pipeline-sm90.sass.gz")
    waits = mma_waits(text)
    assert list(waits["issued"]) == [30, 30]
    assert list(waits["overlap"]) == [181, 26]
    df = parse_sass(text)
    start, end = (int(x, 16) for x in waits["loop"].iloc[0].split("-"))
    body = df[(df["addr"] >= start) & (df["addr"] <= end)]
    first_mma = body[body["opcode"].str.startswith("HGMMA")]["addr"].min()
    assert first_mma > waits["addr"].iloc[0]  # issued after the wait, in the loop body
    assert mma_waits(LISTING).empty  # no wgmma: no rows


def test_text_without_instructions_is_refused():
    with pytest.raises(ValueError, match="nvdisasm"):
        parse_sass("//--- not a listing\n.text.foo:\n")


# ---- measured: Nsight Compute's source page (records/ncu-source-stage26-h100-68ccb02/, written by
# benchmarks/ncu_source.py on an H100: stage26's two Gluon kernels on N128_P64_R4_C16)
PAGES = Path(__file__).parents[2] / "records" / "ncu-source-stage26-h100-68ccb02"
AUX_PAGE = PAGES / "N128_P64_R4_C16-bwd_bwd_aux_gluon_kernel-sass.csv.gz"


def test_source_page_rows_are_the_kernels_instructions():
    df = read_source_page(AUX_PAGE)
    assert df["addr"].iloc[0] == 0 and (df["addr"].diff().dropna() == 16).all()
    assert df.loc[0, "opcode"] == "LDC" and set(df["kind"]) <= set(KIND_ORDER)
    # branch targets are offsets inside the kernel
    targets = df.loc[df["target"] >= 0, "target"]
    assert len(targets) and targets.isin(df["addr"]).all()
    assert any(c.startswith("stall_long_sb") for c in df.columns)


def test_executed_instructions_match_the_raw_page_of_another_run():
    # the ncu raw page of the same kernel code, another session (perf profile --hw-metrics at
    # d57951a, records/profile-N128_P64_R4_C16-auxdq-h100-d57951a/): smsp__inst_executed.sum
    events = pd.read_parquet(Path(__file__).parents[2] / "records" / "profile-N128_P64_R4_C16-auxdq-h100-d57951a"
                             / "events.parquet")
    for kernel in ("bwd_bwd_aux_gluon_kernel", "bwd_bwd_state_terms_gluon_kernel"):
        raw = events[(events["variant"] == "stage26_widep") & (events["kernel_name"] == kernel)]["instructions"]
        page = read_source_page(PAGES / f"N128_P64_R4_C16-{kernel}-sass.csv.gz")
        # equal to a few instructions in 3e8 (the raw page counted 3 more of the aux's than its
        # source page lists: 301826051 against 301826048)
        assert page["executed"].sum() == pytest.approx(raw.iloc[0], abs=8)


def test_measured_regions_find_the_n_walk_with_its_static_size():
    df = read_source_page(AUX_PAGE)
    regions = measured_regions(df).set_index("region")
    assert regions.loc["kernel", "instructions"] == len(df)
    assert regions.loc["kernel", "samples_%"] == pytest.approx(100)
    # the aux's second N walk: the 630-instruction loop body the static listing counts
    # (README, "stage28_termsdk and stage29_auxdq"), over half of what the kernel executes
    walk = regions.loc["loop 0xda50-0x101a0"]
    assert walk["instructions"] == 630 and walk["executed_%"] > 50
    assert walk["executed_%"] < regions.loc["kernel", "executed_%"]


def test_measured_mix_shares_sum_to_the_kernel():
    mix = measured_mix(read_source_page(AUX_PAGE))
    for col in ("executed_%", "samples_%", "smem_excess_wavefronts_%"):
        assert mix[col].sum() == pytest.approx(100)
    assert mix["instructions"].sum() == 4192
    # the excess shared wavefronts (bank conflicts) are stores' and loads' only
    assert set(mix.loc[mix["smem_excess_wavefronts_%"] > 0, "kind"]) == {"shared"}


def test_source_page_errors(tmp_path):
    with pytest.raises(ValueError, match="not an ncu source page"):
        read_source_page("a,b\n1,2\n")
    lines = gzip.decompress(AUX_PAGE.read_bytes()).decode().splitlines()
    cut = tmp_path / "cut.csv"
    cut.write_text("\n".join(lines[:50] + [lines[50][:40]]) + "\n")
    with pytest.raises(ValueError, match="cut off: line 51"):
        read_source_page(cut)
    header = lines[1].replace('"Instructions Executed"', '"Something Else"')
    with pytest.raises(ValueError, match="Instructions Executed"):
        read_source_page("\n".join([lines[0], header] + lines[2:10]) + "\n")
    broken = tmp_path / "page.csv.gz"
    broken.write_bytes(AUX_PAGE.read_bytes()[:1000])
    with pytest.raises(ParseError, match="page.csv.gz: cannot read"):
        read_source_page(broken)


@pytest.mark.parametrize("opcode,operands,written", [
    ("IMAD.WIDE.U32", "R4, R3, 0x4, R8", [4, 5]),
    ("LDS.128", "R8, [R2+0x40]", [8, 9, 10, 11]),
    ("LDSM.16.M88.4", "R12, [R3]", [12, 13, 14, 15]),
    ("CS2R", "R6, SRZ", [6, 7]),
    ("FSEL", "R85, R3, RZ, P1", [85]),
    ("SHFL.IDX", "PT, R93, R7, R9, 0x1f", [93]),  # a predicate destination first
    ("IADD3", "R1, P0, PT, R2, R3, RZ", [1]),
    ("ISETP.GE.AND", "P0, PT, R1, 0x1, PT", []),  # predicates only, though a register follows
    ("LOP3.LUT", "P2, RZ, R96, 0x1, RZ, 0xc0, !PT", []),  # RZ discards
    ("STS", "[R2], R4", []),
    ("UMOV", "UR8, UR9", []),  # uniform registers
    ("HGMMA.64x64x8.F32.TF32", "R24, R76, gdesc[UR8], R24", []),
    ("BRA", "`(.L_x_5)", []),
])
def test_written_registers(opcode, operands, written):
    assert list(written_registers(opcode, operands)) == written


def test_parse_keeps_guards_and_operands():
    df = parse_sass(LISTING)
    row = df[df["addr"] == 0x00F0].iloc[0]  # "@!P0 BRA `(.L_x_0)"
    assert row["guarded"] and row["operands"].startswith("`(.L_x_")
    assert not df["guarded"].iloc[0]


def test_register_hazards_of_the_walk_that_wrote_its_wgmma_operands_early():
    """The pipelined state_terms as compiled before ba1809a formed step j + 1's A operands (ks's
    TF32 parts, in registers) while step j's register-A wgmma ran: on an H100 DV and DMIMO_V came
    out wrong. Every such write lies in the loop, on the path from the wgmma around the back edge
    to the next wait; the default walk (waits at once) has none."""
    text = _listing("bwd_bwd_state_terms_gluon_kernel-stage32-pipeline-sm90.sass.gz")
    hazards = mma_register_hazards(text)
    assert len(hazards) > 0
    df = parse_sass(text)
    mma = df[df["addr"].isin(hazards["mma_addr"])]
    assert set(mma["opcode"]) == {"HGMMA.64x64x8.F32.TF32"}  # ks dstates: A from registers
    start, end = (int(x, 16) for x in mma_waits(text)["loop"].iloc[0].split("-"))
    assert hazards["addr"].between(start, end).all() and (hazards["addr"] < hazards["mma_addr"]).all()
    for a_regs, reg in zip(hazards["a_regs"], hazards["register"]):
        lo, hi = (int(r[1:]) for r in a_regs.split("-"))
        assert lo <= int(reg[1:]) <= hi and hi - lo == 3
    assert mma_register_hazards(_listing("bwd_bwd_state_terms_gluon_kernel-stage32-sm90.sass.gz")).empty
    assert mma_register_hazards(LISTING).empty  # no wgmma


def test_a_parsed_listing_reads_as_its_text():
    """The listing's functions take parse_sass's frame as well as the text (one parse for all)."""
    text = _listing("bwd_bwd_state_terms_gluon_kernel-stage32-pipeline-sm90.sass.gz")
    df = parse_sass(text)
    pd.testing.assert_frame_equal(instruction_mix(df), instruction_mix(text))
    pd.testing.assert_frame_equal(mma_waits(df), mma_waits(text))
    pd.testing.assert_frame_equal(mma_register_hazards(df), mma_register_hazards(text))
    assert len(mma_register_hazards(df)) > 0


def test_a_source_page_parses_from_its_text_as_from_its_path():
    from mamba3_perf.analysis.sass import parse_source_page, read_text

    pd.testing.assert_frame_equal(parse_source_page(read_text(AUX_PAGE)), read_source_page(AUX_PAGE))
