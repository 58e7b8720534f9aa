"""stage45_diagfold: stage43 with the qk_dot diagonal terms of dQ and dK folded into the aux's
weighted scores, where stage43 finishes: neither finishing forms them.

Why (README, "stage42, stage43 and stage44 against TileLang on an H100"): where stage43 finishes,
its two Gluon kernels took 1.35-1.66x (the aux) and 1.54-1.77x (state_terms) of stage42's time on
an H100, more than the pre and post kernels gave back. Part of that is the diagonal term each
finishing adds to every block of dQ or dK (gluon_common._diag_block): R weights and R 16-bit rows
of the other side loaded from global memory per block and element row, and R multiply-adds.

What (aux_gluon's and terms_gluon's FOLD): within a step t every rank's rows turn by the same
rotary angles, so the diagonal term of the pre-rotation gradient, gd kb with gd the same-step
blocks of gamma dkq, is the inverse rotary of gd kr, a rotated-domain term. The aux's weighted
scores dkqw already multiply the rotated rows in both walks' products (dQ: dkqw^T ks with ks = kr
ts; dK: dkqw q, scaled by ts in state_terms), so dkqw + gd / ts carries both diagonal terms into
the rotated-domain rows the finishings invert: one [M, M] add per chunk instead of 2R loads and R
multiply-adds per element of each block, and no GDB stored. DFACTOR, the N sums of kr dks, would
take the fold's part too: the aux stores that part negated (the same-step pairs' kr . qr over N
are lkq / ts, which its first walk formed), and state_terms adds its sums to it. DANGLES' q and
k halves each take an angle term of the fold; those cancel in their sum (the rotation's generator
is antisymmetric). The folded terms run at the products' precision (three bf16 passes) instead
of fp32 multiply-adds: emulated on the CPU (reference.bwd_bwd_ref's ``fold_diag`` at bf16x3,
``benchmarks/precision_plan.py --fold``, records/precision-fold-5a9a3f1.json) that holds the golden
criterion on the official shapes (DFACTOR 0.523-0.579 -> 0.530-0.584 of its bound, DQ / DK /
DANGLES unchanged); the golden check on a GPU has the last word.

Compiled for sm_90 (Triton 3.6, no device; records/ptxas-stage45-5298770.txt), stage43 -> this
stage: state_terms 226-238 -> 210-215 registers at P = 64 (still two programs per SM; at 168,
with stage43_finish.CAP_MAX_P = 64, 60-72 B of spills where stage43's took 104-140; with
terms_gluon.D1_SHARED = 1 48-56, with D1_SHARED = 2 4-16: records/ptxas-stage45-d1shared-777ce24.txt),
its N walk's loops 1083 -> 755 and 1614 -> 1292 SASS instructions
on N128_P64_R4_C16, the aux's 1340 -> 996, 1272 -> 928 and 842 -> 499, its spills at its cap
44-88 -> 56-68 B. Not yet run on a GPU: neither golden-checked nor timed there (README,
"stage45_diagfold", has the device call).

Where (:func:`changes`): where stage43 finishes (stage43_finish.changes); elsewhere this stage is
stage43, that is stage42. The Gluon kernels run on a Hopper GPU only: on the interpreter and
other GPUs this stage's outputs are stage42's bit for bit.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage34_poststeps, stage38_bf16aux, stage43_finish
from mamba3_perf.kernels.registry import StageSpec, register_stage

# knob (benchmarks/sweep_knob.py --knob stage45_diagfold.FOLD=0,1): 0 runs stage43
FOLD: bool = True


def changes(x: dict, meta) -> bool:
    """Whether this stage launches anything other than stage43's kernels: where stage43 finishes."""
    return FOLD and stage43_finish.changes(x, meta)


def keywords(x: dict, meta) -> dict:
    """stage43's stage38_bf16aux.run_with keywords, with ``fold_diag`` where :func:`changes`."""
    kw = stage43_finish.keywords(x, meta)
    return {**kw, "fold_diag": True} if changes(x, meta) else kw


def run(x: dict, out: dict, meta) -> None:
    stage38_bf16aux.run_with(x, out, meta, **keywords(x, meta))


STAGE = register_stage(StageSpec(
    name="stage45_diagfold",
    parent="stage43_finish",
    summary="stage43 with the qk_dot diagonal terms of dQ and dK folded into the aux's weighted "
            "scores where it finishes (rotation-invariant within a step): no diagonal term per block",
    entry=run,
    kernels=stage34_poststeps.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
