"""stage27_rotinline: stage26 with the rotary of q / k inside the Gluon aux and state_terms: the pre
kernel no longer writes the rotated rows.

What bounds stage26 (records/ncu-stage26-4fc1088/, README "What bounds stage26's kernels now"):
its kernels move 5.27 GB on N128_P64_R4_C16, twice what that takes at the H200's bandwidth (1224
us of its 2463), and the largest single item is a copy: the pre kernel writes q and k, biased and
rotated, as fp32 rows QR / KR [B, H, nc, C*R, N] (537 MB there, from 16 MB of 16-bit q / k shared
by the 16 heads), the aux reads both back (537 MB) and state_terms KR again (268 MB). Here the
Gluon aux and state_terms load the 16-bit q / k blocks they walk by TMA straight from the inputs
(rows [B*S*R, G*N]: a chunk's C*R fused rows are one box, gluon_common.input_rows), each with
the block of its rotary partners (columns n +- N/2), and rotate them in registers
(gluon_common.rotated_rows: bias, then cos x_n -+ sin x_partner with the cos / sin the pre kernel
stores once per step and angle, COS / SIN [B, S, H, RD], 2 x 16.8 MB at B = 4, S = 2048, H = 16,
RD = 32). The same arithmetic as the pre kernel's, in the same order; per step of each N walk a
few more loads (bias, cos / sin, from L1 / L2) and multiply-adds, and the TMA boxes are 16-bit, so
the rings' shared memory is unchanged (two 16-bit boxes where one fp32 box was).

Where it applies (:func:`rotates_inline`): where stage26 runs both Gluon kernels (a Hopper GPU;
C*R = 64, 16-bit inputs and cached states) and every block of their N walks lies inside one rotary
half (N / 2 a multiple of the aux's 32-column first-walk block: N >= 64). Elsewhere this stage is
stage26. Gluon kernels do not run on the interpreter; the kernels compile for sm_90 here
(tests/kernels/test_rotinline.py) and the golden check on Hopper is tests/kernels/test_gluonaux.py's
(passed on an H100 at d57951a). Measured there per kernel on N128_P64_R4_C16 (perf profile,
records/profile-N128_P64_R4_C16-fusions-h100-d57951a/): pre 241 -> 51 us a launch, aux 1148 ->
1293, state_terms 623 -> 695: 2673 against stage26's 2643 us of kernels. Not faster; kept as the
first step of the fused-finishing record (README, "Stages 27-29 on a Hopper GPU").
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage23_gluonterms, stage24_gluonaux, stage25_subchunk, stage26_widep
from mamba3_perf.kernels.registry import StageSpec, register_stage


def rotates_inline(x: dict, meta) -> bool:
    """Whether the Gluon aux and state_terms both run for ``x`` and ``meta`` (stage26's rule for
    the aux) and can rotate their blocks (module docstring), and TMA can read q / k where they
    lie (a 16-byte aligned start: a contiguous view into a larger buffer may not have one)."""
    return (stage24_gluonaux.uses_gluon_aux(x, meta, wide_p=True) and stage23_gluonterms.uses_gluon(x, meta)
            and stage24_gluonaux.aux_gluon.supports_rotation(meta)
            and stage23_gluonterms.terms_gluon.supports_rotation(meta)
            and all(x[n].data_ptr() % 16 == 0 for n in ("q", "k")))


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's: stage26's, and ``rot_inline`` where it applies."""
    kw = stage26_widep.plan(x, meta)
    if rotates_inline(x, meta):
        kw["rot_inline"] = True
    return kw


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage27_rotinline",
    parent="stage26_widep",
    summary="the Gluon aux and state_terms rotate the 16-bit q / k blocks they load themselves: the "
            "pre kernel writes cos / sin per step instead of the fp32 rotated rows",
    entry=run,
    kernels=stage26_widep.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
