"""stage24_gluonaux: which shapes and inputs its Gluon aux takes, that the kernel compiles for
the H200 (sm_90) on this machine within two programs' shared memory per SM, that its launcher
refuses an aux configuration it does not implement, and (on a Hopper GPU only) stages 23 and 24
against the golden."""
import pytest
import torch

from mamba3_perf.bench import prepare
from mamba3_perf.kernels import cases, get_case
from mamba3_perf.kernels.bwd_bwd import aux_gluon, stage24_gluonaux, terms_gluon
from mamba3_perf.kernels.bwd_bwd.common import is_hopper


@pytest.mark.parametrize("case_id,runs", [
    ("small-N32_P64_R4_C16", True), ("small-N64_P64_R4_C16", True), ("small-N128_P64_R4_C16", True),
    ("small-N128_P64_R8_C8", True), ("small-N128_P64_R2_C32", True), ("small-N128_P64_R1_C64", True),
    ("small-N128_P32_R4_C16", True),  # P = 32: the increments run on 64 rows
    ("small-N256_P64_R4_C8", False),  # C*R = 32: measured slower than stage22's aux (module docstring)
    ("small-N64_P128_R4_C16", False), ("small-N16_P64_R4_C8", False),
])
def test_gluon_aux_shapes(case_meta, case_id, runs):
    assert aux_gluon.supported(case_meta(case_id)) is runs


def test_gluon_aux_at_p128_only_with_its_knob(case_meta, monkeypatch):
    """P = 128 is written and compiled, not yet run on a GPU: off until measured."""
    assert aux_gluon.WIDE_P is False
    monkeypatch.setattr(aux_gluon, "WIDE_P", True)
    assert aux_gluon.supported(case_meta("small-N64_P128_R4_C16"))
    assert not aux_gluon.supported(case_meta("small-N128_P128_R4_C8"))  # C*R = 32


def test_gluon_aux_only_on_hopper(case_meta):
    case = get_case("small-N64_P64_R4_C16")
    assert not stage24_gluonaux.uses_gluon_aux(prepare(case, device="cpu"), case_meta(case))  # CPU


def test_gluon_aux_refuses_other_configurations(case_meta):
    case = get_case("small-N64_P64_R4_C16")
    with pytest.raises(ValueError, match="diag_blocks and increments"):
        aux_gluon.launch_aux(prepare(case, device="cpu"), {}, {}, case_meta(case), diag_blocks=True,
                             increments=False)


@pytest.mark.parametrize("shape", [(128, 64, 4, 16), (32, 64, 4, 16), (128, 64, 8, 8), (128, 32, 4, 16)])
def test_gluon_aux_compiles_for_sm90(compile_stage, shape):
    k = compile_stage("stage24_gluonaux", *shape, "aux_gluon")["bwd_bwd_aux_gluon_kernel"]
    assert k["num_warps"] == 4
    assert k["programs_per_sm_by_shared"] >= 2, k["shared"]
    wgmma = sorted({tuple(m["instr"]) for m in k["mma"] if m["version"] == 3})
    # the N walk's 16 columns; the [64, 64] scores; dPsiV's P columns
    assert wgmma == sorted({(16, 16, 8), (16, 64, 8), (16, shape[1], 8)}), wgmma


def test_gluon_aux_at_p128_compiles_for_sm90_in_one_program_per_sm(compile_stage):
    """With aux_gluon.WIDE_P: the aux forms the increments at P = 128 too (two products of 64
    rows), so the pipeline launches the scan alone (no increment kernel), and the aux fits one
    program's shared memory per SM."""
    ks = compile_stage("stage25_subchunk", 64, 128, 4, 16, "", knobs=["aux_gluon.WIDE_P=1"])
    assert "bwd_bwd_pass_increment_kernel" not in ks and "bwd_bwd_pass_scan_kernel" in ks, sorted(ks)
    k = ks["bwd_bwd_aux_gluon_kernel"]
    assert k["num_warps"] == 4 and k["programs_per_sm_by_shared"] >= 1, k["shared"]
    wgmma = sorted({tuple(m["instr"]) for m in k["mma"] if m["version"] == 3})
    assert wgmma == [(16, 16, 8), (16, 64, 8), (16, 128, 8)], wgmma


def test_step_descriptors_only_in_stage30(compile_stage):
    """stage30 launches the aux with DYN (its second walk's operands viewed per step), stage26
    without; both compile to the same shared memory and wgmma shapes."""
    k26 = compile_stage("stage26_widep", 128, 64, 4, 16, "aux_gluon")["bwd_bwd_aux_gluon_kernel"]
    k30 = compile_stage("stage30_stepdesc", 128, 64, 4, 16, "aux_gluon")["bwd_bwd_aux_gluon_kernel"]
    assert k30["keywords"]["DYN"] is True and k26["keywords"]["DYN"] is False
    assert k30["shared"] == k26["shared"] and k30["num_warps"] == k26["num_warps"] == 4
    assert sorted(map(str, k30["mma"])) == sorted(map(str, k26["mma"]))


def test_two_warpgroups_compile_at_p128_in_one_program_per_sm(compile_stage):
    """aux_gluon.AUX_WARPGROUPS=2 (off): 8 warps, each warpgroup on half of the scores' and
    dPsiV's columns and on 16 columns of a 32-column step of the second walk, so no TF32 wgmma
    has N < 16 (triton#10629), in one program's shared memory per SM."""
    one = compile_stage("stage30_stepdesc", 64, 128, 4, 16, "aux_gluon")["bwd_bwd_aux_gluon_kernel"]
    two = compile_stage("stage30_stepdesc", 64, 128, 4, 16, "aux_gluon",
                        knobs=["aux_gluon.AUX_WARPGROUPS=2"])["bwd_bwd_aux_gluon_kernel"]
    assert aux_gluon.AUX_WARPGROUPS == 1
    assert (one["num_warps"], two["num_warps"]) == (4, 8) and two["programs_per_sm_by_shared"] >= 1, two["shared"]
    wgmma = sorted({tuple(m["instr"]) for m in two["mma"] if m["version"] == 3})
    assert wgmma == [(16, 16, 8), (16, 32, 8), (16, 64, 8)], wgmma


HOPPER = torch.cuda.is_available() and is_hopper("cuda")


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("stage", ["stage23_gluonterms", "stage24_gluonaux", "stage27_rotinline", "stage28_termsdk",
                                   "stage29_auxdq", "stage30_stepdesc", "stage32_banks", "stage39_auxregs",
                                   "stage40_termsring", "stage41_streamregs", "stage42_precap",
                                   "stage43_finish", "stage45_diagfold"])
@pytest.mark.parametrize("case", cases("hopper"), ids=lambda c: c.id)
def test_gluon_stages_match_golden_on_hopper(cuda_golden, stage, case):
    """With the benchmarks' cached-state dtype (16-bit for 16-bit cases, as upstream; the Gluon
    aux runs only with those). stage27: the Gluon kernels rotating q / k themselves where it
    takes that (C*R = 64, N >= 64: hop-N64, hop-N128, hop-P128, hop-fp16-noD, ...); stage28:
    state_terms finishing dK there too; stage39-41: the register caps and the one-slot ring where
    their rules take a case (hop-N128, hop-P128-C8, hop-C8, ...), their parents elsewhere (hop-fp32,
    fp32 cached states)."""
    cuda_golden(stage, case)


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("stage", ["stage24_gluonaux", "stage25_subchunk"])
@pytest.mark.parametrize("case_id", ["hop-P128", "hop-fp16-noD"])
def test_gluon_aux_at_p128_matches_golden_on_hopper(cuda_golden, stage, case_id, monkeypatch):
    """aux_gluon.WIDE_P on: P = 128 through the Gluon aux (and, on hop-fp16-noD, P = 64 with the
    knob on: unchanged)."""
    monkeypatch.setattr(aux_gluon, "WIDE_P", True)
    cuda_golden(stage, case_id)


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("stage", ["stage26_widep", "stage29_auxdq"])
@pytest.mark.parametrize("case_id", ["hop-P128", "hop-fp16-noD", "hop-C8", "hop-N16-C8-tail"])
def test_gluon_terms_on_8_column_steps_match_golden_on_hopper(cuda_golden, stage, case_id, monkeypatch):
    """terms_gluon.WG_COLS=8 (state_terms' N walk on 8-column steps) through stage26, and through
    stage29 where state_terms rotates k and finishes dK on 8-column pairs."""
    monkeypatch.setattr(terms_gluon, "WG_COLS", 8)
    cuda_golden(stage, case_id)


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("case_id", ["hop-P128", "hop-fp16-noD", "hop-N128"])
def test_gluon_aux_on_two_warpgroups_matches_golden_on_hopper(cuda_golden, case_id, monkeypatch):
    """aux_gluon.AUX_WARPGROUPS=2 through stage30 (P = 128 and P = 64); with the transposed layouts
    on it passed on an H100 (test_transpose_layouts.py, the knob's comment)."""
    monkeypatch.setattr(aux_gluon, "AUX_WARPGROUPS", 2)
    cuda_golden("stage30_stepdesc", case_id)


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernels run on Hopper GPUs only")
@pytest.mark.parametrize("d1_shared", [1, 2])
@pytest.mark.parametrize("case", cases("hopper"), ids=lambda c: c.id)
def test_stage45_with_the_pair_in_shared_memory_matches_golden_on_hopper(cuda_golden, case, d1_shared, monkeypatch):
    """terms_gluon.D1_SHARED through stage45 (its bounds lifted, state_terms capped at P = 64 too):
    the pair's first-half block (1), or both blocks finished on halves of their rows (2), from
    shared memory wherever state_terms finishes dK."""
    from mamba3_perf.kernels.bwd_bwd import stage43_finish

    monkeypatch.setattr(terms_gluon, "D1_SHARED", d1_shared)
    monkeypatch.setattr(stage43_finish, "MIN_N", None)
    monkeypatch.setattr(stage43_finish, "MAX_R", None)
    monkeypatch.setattr(stage43_finish, "CAP_MAX_P", 64)
    cuda_golden("stage45_diagfold", case)
