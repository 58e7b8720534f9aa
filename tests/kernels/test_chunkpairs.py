"""stage31_chunkpairs: which shapes take two chunks per state_terms program, that the paired
kernel compiles for the H200 (sm_90) on this machine within the programs per SM stage30's has,
and (on a Hopper GPU only) the stage against the golden."""
import pytest
import torch

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import get_case
from mamba3_perf.kernels.bwd_bwd import aux_gluon, stage24_gluonaux, stage30_stepdesc, stage31_chunkpairs, terms_gluon
from mamba3_perf.kernels.bwd_bwd.common import is_hopper

HOPPER = torch.cuda.is_available() and is_hopper("cuda")


@pytest.mark.parametrize("case_id,cp", [
    ("small-N256_P64_R4_C8", 2), ("small-N128_P128_R4_C8", 2), ("small-N16_P64_R4_C8", 2),  # C*R = 32
    ("small-N128_P64_R4_C16", 1), ("small-N128_P64_R8_C8", 1),  # C*R = 64: the rows are full
])
def test_pairs_only_where_a_chunk_has_32_rows(case_meta, case_id, cp):
    meta = case_meta(case_id)
    assert terms_gluon.chunks_per_program(meta, True) == cp
    assert terms_gluon.chunks_per_program(meta, False) == 1
    assert terms_gluon.chunks_per_program(meta) == 1  # CHUNK_PAIRS off: stages 23-30 as measured


def test_no_pairs_over_an_odd_number_of_chunks(case_meta):
    case = get_case("small-N16_P64_R4_C8")
    meta = case_meta(case.with_(S=case.C * 5))
    assert meta.nchunks == 5 and terms_gluon.chunks_per_program(meta, True) == 1


def test_plan_is_stage30s_with_pairs(case_meta):
    case = get_case("small-N256_P64_R4_C8")
    x, meta = prepare(case, device="cpu"), case_meta(case)
    assert stage31_chunkpairs.plan(x, meta) == dict(stage30_stepdesc.plan(x, meta), chunk_pairs=True)


@pytest.mark.parametrize("shape,programs", [((256, 64, 4, 8), 2), ((128, 128, 4, 8), 1)])
def test_paired_state_terms_compiles_for_sm90(compile_stage, shape, programs):
    """Two chunks: two dstates / states blocks a step and their split copies, within two programs
    per SM at P = 64 and one at P = 128 (stage30's), twice the wgmma of the same shapes."""
    one = compile_stage("stage30_stepdesc", *shape, "state_terms")["bwd_bwd_state_terms_gluon_kernel"]
    two = compile_stage("stage31_chunkpairs", *shape, "state_terms")["bwd_bwd_state_terms_gluon_kernel"]
    assert two["keywords"]["CP"] == 2 and one["keywords"]["CP"] == 1
    assert two["programs_per_sm_by_shared"] >= programs, two["shared"]
    assert two["shared"] > one["shared"]
    shapes = sorted({tuple(m["instr"]) for m in two["mma"] if m["version"] == 3})
    assert shapes == sorted({tuple(m["instr"]) for m in one["mma"] if m["version"] == 3})


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("case_id", ["hop-C8", "hop-P128-C8", "hop-N16-C8-tail", "small-N256_P64_R4_C8"])
def test_matches_golden_on_hopper(cuda_golden, case_id):
    """Both Gluon kernels on pairs where a chunk has 32 rows (state_terms only at N = 16)."""
    cuda_golden("stage31_chunkpairs", case_id)


@pytest.mark.parametrize("case_id,runs", [
    ("small-N256_P64_R4_C8", True), ("small-N128_P128_R4_C8", True),  # C*R = 32 in pairs (P = 128: wide_p)
    ("small-N16_P64_R4_C8", False),  # N = 16: no whole 32-column block of the first walk
])
def test_gluon_aux_takes_pairs_with_its_knob(case_meta, case_id, runs):
    meta = case_meta(case_id)
    assert not aux_gluon.supported(meta, wide_p=True)  # CHUNK_PAIRS off: C*R = 32 keeps the Triton aux
    assert aux_gluon.supported(meta, wide_p=True, chunk_pairs=True) is runs


def test_gluon_aux_refuses_a_chunk_of_32_rows_alone(case_meta):
    case = get_case("small-N256_P64_R4_C8")
    with pytest.raises(ValueError, match="64 fused rows a program"):
        aux_gluon.launch_aux(prepare(case, device="cpu"), {}, {}, case_meta(case), diag_blocks=True,
                             increments=True, chunk_pairs=False)


@pytest.mark.parametrize("shape,programs", [((256, 64, 4, 8), 2), ((128, 128, 4, 8), 1)])
def test_paired_gluon_aux_compiles_for_sm90(compile_stage, shape, programs):
    """The increments on each chunk's 32 K rows (K-slices of the shared operands), dPhiO against
    two states blocks a step: within two programs per SM at P = 64, one at P = 128."""
    k = compile_stage("stage31_chunkpairs", *shape, "aux_gluon", knobs=["aux_gluon.CHUNK_PAIRS=1"])
    k = k["bwd_bwd_aux_gluon_kernel"]
    assert k["keywords"]["CP"] == 2
    assert k["programs_per_sm_by_shared"] >= programs, k["shared"]
    wgmma = sorted({tuple(m["instr"]) for m in k["mma"] if m["version"] == 3})
    assert wgmma == sorted({(16, 16, 8), (16, 64, 8), (16, shape[1], 8)}), wgmma


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("case_id", ["hop-C8", "hop-P128-C8"])
def test_pairs_through_stage29_match_golden_on_hopper(cuda_golden, case_id, monkeypatch):
    """Both kernels' CHUNK_PAIRS knobs through stage29, where they rotate q / k and finish dQ / dK
    on pairs of chunks (stage31's plan does not take those paths)."""
    monkeypatch.setattr(aux_gluon, "CHUNK_PAIRS", True)
    monkeypatch.setattr(terms_gluon, "CHUNK_PAIRS", True)
    cuda_golden("stage29_auxdq", case_id)


@pytest.mark.parametrize("case_id,want", [
    ("N256_P64_R4_C8", dict(wide_p=True, qk_inputs=True, step_desc=True, chunk_pairs=True)),  # P < AUX_PAIRS_MIN_P
    ("N128_P128_R4_C8", dict(wide_p=True, inputs=True, step_desc=True, chunk_pairs=True, aux_pairs=True)),
    ("N16_P64_R4_C8", dict(wide_p=True, step_desc=True, chunk_pairs=True)),  # N = 16: the Triton aux
    ("N128_P64_R4_C16", dict(wide_p=True, step_desc=True, chunk_pairs=True)),  # C*R = 64: stage30's
])
def test_plan_on_hopper(monkeypatch, case_meta, case_id, want):
    small = get_case("small-" + case_id)
    monkeypatch.setattr(stage24_gluonaux, "is_hopper", lambda device: True)
    meta = case_meta(get_case(case_id).with_(B=1, S=small.S, H=2))
    assert stage31_chunkpairs.plan(prepare(small, device="cpu"), meta) == want
