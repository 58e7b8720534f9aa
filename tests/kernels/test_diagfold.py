"""stage45_diagfold: the qk_dot diagonal terms folded into the aux's weighted scores (aux_gluon's
and terms_gluon's FOLD). The Gluon kernels run on Hopper GPUs only (the golden check there:
tests/kernels/test_gluonaux.py); here, the identity they rest on, replayed in fp64 with the
kernels' formulas, the rule, and what the kernels compile to for sm_90."""
import pytest
import torch

from mamba3_perf.analysis.occupancy import occupancy
from mamba3_perf.kernels import get_case, make_inputs
from mamba3_perf.kernels.reference import _rotate


def _rot(x, ang, inverse=False):
    """reference._rotate on [C, R, N] rows with per-step angles [C, RD]."""
    return _rotate(x[None, None], ang[None, None], inverse)[0, 0]


def test_fold_carries_the_diagonal_terms_through_the_rotation():
    """What the finishings compute with the diagonal terms (gluon_common.finish_pair: the inverse
    rotary of the rotated-domain rows plus gd kb, gd qb; DANGLES from those rows; DFACTOR the N sums
    of kr dks) equals what they compute from the folded scores dkqw + gd / ts without them, DFACTOR
    less the part the aux stores (per step gamma / ts^2 times DSSDA's diagonal, the sum of lkq dkq
    over its same-step pairs); a step with ts = 0 (and gamma = 0, as dt = 0 gives: a padded step)
    takes no fold."""
    g = torch.Generator().manual_seed(0)
    C, R, N, RD = 5, 3, 8, 3
    CR = C * R
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    qb, kb, other = rnd(C, R, N), rnd(C, R, N), rnd(C, R, N)
    ang = rnd(C, RD).requires_grad_(True)
    dkq, w = rnd(CR, CR), rnd(CR, CR)  # dkq = PsiV dPhiO^T; w: the weighted scores dkqw = dkq wt
    gamma = torch.rand(C, generator=g, dtype=torch.float64)
    ts = gamma + torch.rand(C, generator=g, dtype=torch.float64)
    gamma[2], ts[2] = 0.0, 0.0  # a padded step
    t = torch.arange(CR) // R
    same = t[:, None] == t[None, :]
    gd = torch.where(same, dkq, 0.0) * gamma[t][:, None]  # aux_gluon: gd, rows k, columns q
    inv = torch.where(ts != 0, 1 / torch.where(ts != 0, ts, 1.0), 0.0)[t]
    gd_steps = gd.reshape(C, R, C, R).diagonal(dim1=0, dim2=2).permute(2, 0, 1)  # [t, r_k, r_q] blocks

    def finish(scores, diag):
        qr, kr = _rot(qb, ang).reshape(CR, N), _rot(kb, ang).reshape(CR, N)
        ks = kr * ts[t][:, None]
        dq_rot = scores.T @ ks  # the aux's dQ rows: dkqw^T ks
        dks = scores @ qr.detach() + other.reshape(CR, N)  # the aux's dK rows (+ state_terms' own part)
        dk_rot = dks * ts[t][:, None]
        dq = _rot(dq_rot.detach().reshape(C, R, N), ang.detach(), inverse=True)
        dk = _rot(dk_rot.detach().reshape(C, R, N), ang.detach(), inverse=True)
        if diag:  # gluon_common._diag_block, both sides
            dq = dq + torch.einsum("tkq,tkn->tqn", gd_steps, kb)
            dk = dk + torch.einsum("tkq,tqn->tkn", gd_steps, qb)
        dfac = (kr.detach() * dks.detach()).sum(1).reshape(C, R).sum(1)
        # DANGLES, both halves: the angle gradient of <d, rot(x)> with the rotated-domain rows d held
        dang, = torch.autograd.grad((dq_rot.detach() * qr).sum() + (dk_rot.detach() * kr).sum(), ang)
        return dq, dk, dfac, dang, qr.detach(), ks.detach()

    dq, dk, dfac, dang, qr, ks = finish(w, diag=True)
    fdq, fdk, fdfac, fdang, _, _ = finish(w + gd * inv[:, None], diag=False)
    lkq = ks @ qr.T  # the aux's first walk
    dssda_diag = (lkq * dkq).reshape(C, R, C, R).sum((1, 3)).diagonal()  # DSSDA's diagonal
    inv_t = torch.where(ts != 0, 1 / torch.where(ts != 0, ts, 1.0), 0.0)
    fdfac = fdfac - dssda_diag * gamma * inv_t * inv_t  # aux_gluon: fold_fac, stored negated
    for got, want in ((fdq, dq), (fdk, dk), (fdfac, dfac), (fdang, dang)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # and the diagonal terms matter here: without them the finishings differ
    assert not torch.allclose(finish(w, diag=False)[0], dq)


@pytest.mark.parametrize("case_id,folds", [
    ("N128_P64_R4_C16", True), ("N128_P32_R4_C16", True), ("N128_P64_R2_C32", True), ("N128_P64_R1_C64", True),
    ("N64_P64_R4_C16", False), ("N128_P64_R8_C8", False), ("N256_P64_R4_C8", False),
])
def test_rule_on_hopper(plan_on_hopper, case_id, folds):
    """With a Hopper GPU assumed: stage45 folds where stage43 finishes, and is stage43 elsewhere."""
    from mamba3_perf.kernels.bwd_bwd import stage43_finish, stage45_diagfold

    mine, theirs = plan_on_hopper(stage45_diagfold.keywords, stage43_finish.keywords, case_id)
    assert mine == (dict(theirs, fold_diag=True) if folds else theirs)


def test_knob_gives_stage43():
    from mamba3_perf.kernels.bwd_bwd import stage43_finish, stage45_diagfold
    from mamba3_perf.kernels.knobs import single_knobs

    c = get_case("small-N128_P64_R4_C16")
    x = make_inputs(c, states_dtype=torch.bfloat16)
    with single_knobs(["stage45_diagfold.FOLD=0"]):
        assert stage45_diagfold.keywords(x, c) == stage43_finish.keywords(x, c)


def test_fold_needs_both_finishings():
    """fold_diag without the finishing it removes the diagonal term from is refused, not run."""
    from mamba3_perf.kernels.bwd_bwd import aux_gluon, terms_gluon

    c = get_case("small-N128_P64_R4_C16")
    with pytest.raises(ValueError, match="fold_diag: only with finish_dq"):
        aux_gluon.launch_aux({}, {}, {}, c, diag_blocks=True, increments=True, rot_inline=True, fold_diag=True)
    with pytest.raises(ValueError, match="fold_diag: only with finish_dk"):
        terms_gluon.launch_state_terms({"q": torch.empty(0)}, {}, {}, c, rot_inline=True, fold_diag=True)


def test_both_gluon_kernels_fold(compile_stage):
    """N128_P64_R4_C16: stage45 launches stage43's kernels with FOLD in both and nothing else
    changed, the aux at stage43's register cap and shared memory."""
    mine = compile_stage("stage45_diagfold", 128, 64, 4, 16, "gluon")
    theirs = compile_stage("stage43_finish", 128, 64, 4, 16, "gluon")
    for k in ("bwd_bwd_aux_gluon_kernel", "bwd_bwd_state_terms_gluon_kernel"):
        assert mine[k]["keywords"]["FOLD"] and not theirs[k]["keywords"]["FOLD"], k
        assert {a: v for a, v in mine[k]["keywords"].items() if a != "FOLD"} == \
               {a: v for a, v in theirs[k]["keywords"].items() if a != "FOLD"}, k
    aux = "bwd_bwd_aux_gluon_kernel"
    assert (mine[aux]["maxnreg"], mine[aux]["shared"]) == (theirs[aux]["maxnreg"], theirs[aux]["shared"])


def test_stage45_is_stage42_on_the_interpreter(same_outputs):
    """Off Hopper GPUs stage45 launches stage42's kernels: the same outputs bit for bit."""
    same_outputs("stage45_diagfold", "stage42_precap", "small-N128_P64_R4_C16")


def test_d1_shared_holds_the_pair_in_shared_memory(compile_stage):
    """terms_gluon.D1_SHARED: where state_terms finishes dK, the pair's first-half block ([64, BNB]
    fp32; 1) or both its blocks (2: finished on halves of their rows) take shared memory instead of
    registers; where it does not finish, nothing changes."""
    k = "bwd_bwd_state_terms_gluon_kernel"
    off = compile_stage("stage45_diagfold", 128, 64, 4, 16, "state_terms")[k]
    assert not off["keywords"]["D1S"]
    for v in (1, 2):
        on = compile_stage("stage45_diagfold", 128, 64, 4, 16, "state_terms", knobs=[f"terms_gluon.D1_SHARED={v}"])[k]
        assert on["keywords"]["D1S"] == v
        assert on["shared"] - off["shared"] == min(v, 2) * 64 * 16 * 4  # BNB = 16 at P = 64
        assert occupancy(168, 128, on["shared"]).blocks_per_sm == 3  # room for three programs
    plain = compile_stage("stage42_precap", 128, 64, 4, 16, "state_terms", knobs=["terms_gluon.D1_SHARED=2"])[k]
    assert not plain["keywords"]["D1S"]


def test_the_reference_in_the_folds_formulation_gives_its_gradients():
    """reference.bwd_bwd_ref's ``fold_diag`` (stage45's formulation, which analysis.precision
    judges at tensor-core schemes) gives the reference's 12 gradients in fp32: DQ and DK to their
    16-bit rounding, the rest to fp32 rounding."""
    from mamba3_perf.kernels.reference import GRADIENTS, bwd_bwd_ref

    c = get_case("small-N128_P64_R4_C16")
    x = make_inputs(c, states_dtype=torch.bfloat16)
    plain = bwd_bwd_ref(**x, chunk_size=c.C, rotary_dim_divisor=c.rotary_dim_divisor)
    folded = bwd_bwd_ref(**x, chunk_size=c.C, rotary_dim_divisor=c.rotary_dim_divisor, fold_diag=True)
    for g in GRADIENTS:
        if plain[g] is None:
            assert folded[g] is None, g
            continue
        tol = dict(rtol=2e-2, atol=2e-2) if plain[g].dtype != torch.float32 else dict(rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(folded[g].float(), plain[g].float(), **tol, msg=g)
    assert not torch.equal(folded["DFACTOR"], plain["DFACTOR"])  # formed otherwise, not passed through
