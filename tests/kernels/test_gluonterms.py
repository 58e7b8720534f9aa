"""stage23_gluonterms: which shapes its Gluon state_terms takes, and that the kernel compiles
for the H200 (sm_90) on this machine within two programs' shared memory per SM where P <= 64
(one at P = 128) (the stage against the golden on a Hopper GPU: test_gluonaux.py, with
stage24)."""
import pytest

from mamba3_perf.kernels import get_case, make_inputs
from mamba3_perf.kernels.bwd_bwd import stage23_gluonterms, terms_gluon


@pytest.mark.parametrize("case_id,runs", [
    ("small-N32_P64_R4_C16", True), ("small-N128_P64_R4_C16", True), ("small-N128_P32_R4_C16", True),
    ("small-N128_P64_R8_C8", True), ("small-N128_P64_R1_C64", True),
    ("small-N16_P64_R4_C8", True), ("small-N256_P64_R4_C8", True),  # C*R = 32, run on 64 rows
    ("small-N64_P128_R4_C16", True), ("small-N128_P128_R4_C8", True),  # P = 128: one program per SM
    ("edge-P24", False), ("edge-N48", True),  # P not 32 / 64 / 128; N = 48: three 16-row steps
])
def test_gluon_terms_shapes(case_meta, case_id, runs):
    assert terms_gluon.supported(case_meta(case_id)) is runs


def test_gluon_terms_eight_warps_walk_32_rows(case_meta, monkeypatch):
    """The swept 8-warp launch (benchmarks/sweep_launch.py, gluon_terms target): two warpgroups,
    each on 16 of a step's 32 N rows, so N must be a multiple of 32."""
    monkeypatch.setitem(terms_gluon.LAUNCH, "num_warps", 8)
    assert terms_gluon.block_rows(case_meta("small-N64_P128_R4_C16")) == 32
    assert not terms_gluon.supported(case_meta("edge-N48"))
    monkeypatch.delitem(terms_gluon.LAUNCH, "num_warps")
    assert terms_gluon.block_rows(case_meta("small-N64_P128_R4_C16")) == 16


def test_gluon_terms_wg_cols_knob_sets_the_step(case_meta, monkeypatch):
    """terms_gluon.WG_COLS: N columns per warpgroup and step of the N walk (16 when unset)."""
    meta = case_meta("small-N64_P128_R4_C16")
    monkeypatch.setattr(terms_gluon, "WG_COLS", 8)
    assert terms_gluon.block_rows(meta) == 8
    monkeypatch.setitem(terms_gluon.LAUNCH, "num_warps", 8)
    assert terms_gluon.block_rows(meta) == 16  # two warpgroups of 8 columns
    monkeypatch.setattr(terms_gluon, "WG_COLS", None)
    monkeypatch.delitem(terms_gluon.LAUNCH, "num_warps")
    assert terms_gluon.block_rows(meta) == 16


def test_gluon_terms_only_on_hopper(case_meta):
    x = make_inputs(get_case("small-N64_P64_R4_C16"))
    assert not stage23_gluonterms.uses_gluon(x, case_meta("small-N64_P64_R4_C16"))  # CPU tensors


@pytest.mark.parametrize("shape", [(128, 64, 4, 16), (32, 64, 4, 16), (128, 32, 4, 16), (256, 64, 4, 8),
                                   (64, 128, 4, 16)])
def test_gluon_terms_compile_for_sm90(compile_stage, shape):
    k = compile_stage("stage23_gluonterms", *shape, "state_terms")["bwd_bwd_state_terms_gluon_kernel"]
    assert k["num_warps"] == 4
    programs = 2 if shape[1] <= 64 else 1  # per SM
    assert k["programs_per_sm_by_shared"] >= programs, k["shared"]
    wgmma = sorted({tuple(m["instr"]) for m in k["mma"] if m["version"] == 3})
    assert wgmma == sorted({(16, 16, 8), (16, shape[1], 8)}), wgmma  # dK_raw's 16 columns, dPsiV's P


@pytest.mark.parametrize("shape,programs", [((64, 128, 4, 16), 2), ((128, 128, 4, 8), 2), ((128, 64, 4, 16), 3)])
def test_gluon_terms_on_8_column_steps_fit_more_programs_per_sm(compile_stage, shape, programs):
    """With terms_gluon.WG_COLS=8 the ring, the split dstates copies and the [M, 8] tiles halve:
    two programs' shared memory per SM at P = 128 (one on 16 columns), three at P = 64 (registers
    allow as many: ptxas with Triton 3.6, 197 at P = 128 and 140 at P = 64, against 232 / 180),
    on wgmma of 8 columns for dK_raw."""
    k = compile_stage("stage23_gluonterms", *shape, "state_terms", knobs=["terms_gluon.WG_COLS=8"])
    k = k["bwd_bwd_state_terms_gluon_kernel"]
    assert k["programs_per_sm_by_shared"] >= programs, k["shared"]
    wgmma = sorted({tuple(m["instr"]) for m in k["mma"] if m["version"] == 3})
    assert wgmma == sorted({(16, 8, 8), (16, shape[1], 8)}), wgmma
