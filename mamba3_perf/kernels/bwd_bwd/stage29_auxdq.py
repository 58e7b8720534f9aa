"""stage29_auxdq: stage28 with dQ finished in the Gluon aux: no post kernel at all.

After stage28 the post kernel does dQ alone: it reads the rotated-domain rows DQR [B, H, nc,
C*R, N] fp32 the aux stored (268 MB written and 268 MB read back on N128_P64_R4_C16) for the
inverse rotary, the qk_dot diagonal term and DANGLES' q half. stage27's aux already holds, in its
second N walk, the pre-rotation q rows of every block and of its rotary partners. Here that walk
takes each first-half block and then its partners (aux_gluon's FIN) and on each pair does what
the post kernel did (gluon_common.finish_pair, the same function state_terms finishes dK with in
stage28, on the q side: the diagonal term dq[t, r_q] = sum_r_k GDB[t, r_k, r_q] kb[t, r_k] from
the weight blocks it stored and the 16-bit k): DANGLES' q half, then DQ. state_terms then adds
DANGLES' k half to it, and the post kernel is not launched: DQR neither written nor read (537 MB
less there), one launch fewer per call.

Where it applies: where stage27 rotates inline; elsewhere this stage is stage28 (so stage26). The
finishing arithmetic is replayed in torch against the post kernel (tests/kernels/test_auxdq.py),
the Gluon kernels compile for sm_90; the golden check on Hopper is tests/kernels/test_gluonaux.py's
(passed on an H100 at d57951a, and side by side on every official and regular case). Measured
there against stage26, one process per case (records/h100-auxdq-vs-tilelang-d57951a.json):
1.051-1.099x slower on the seven official shapes where it applies, 1.044x in geomean over the
eleven. Its kernels move 44 % fewer bytes but execute 20 % more instructions, the aux 549 M against
302 M at 255 registers and 12 % of the warps resident (ncu, records/profile-N128_P64_R4_C16-auxdq-
h100-d57951a/): the aux 1148 -> 1615 us a launch on N128_P64_R4_C16.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage25_subchunk, stage28_termsdk
from mamba3_perf.kernels.registry import StageSpec, register_stage


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's: stage28's, and ``finish_dq`` where it finishes dK."""
    kw = stage28_termsdk.plan(x, meta)
    if kw.get("finish_dk"):
        kw["finish_dq"] = True
    return kw


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage29_auxdq",
    parent="stage28_termsdk",
    summary="the Gluon aux finishes dQ (inverse rotary, diagonal term, DANGLES' q half) on rotary "
            "block pairs: no DQR rows through HBM and no post kernel",
    entry=run,
    kernels=stage28_termsdk.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
