"""stage28_termsdk: stage27 with dK finished in state_terms: its rotated-domain rows no longer go
through HBM to the post kernel.

After stage27 the dK chain still crosses three kernels: the aux stores its chunk-local part
(DKS), state_terms adds the dstates term and stores the rotated-domain rows DKR [B, H, nc, C*R,
N] fp32 (268 MB on N128_P64_R4_C16), and the post kernel reads them back for the inverse rotary,
the qk_dot diagonal term and DANGLES. stage27's state_terms already holds, for every block of
its N walk, the pre-rotation k rows and those of the block's rotary partners (it rotates them
itself). Here its walk takes each first-half block and then its partners
(terms_gluon's FIN), and on each pair does what the post kernel did with them
(terms_gluon._finish_dk, stage21_halves' post arithmetic term for term): the inverse rotary, the
diagonal term (R multiply-adds per element from the aux's weight blocks GDB and the 16-bit q),
DK stored in its dtype, and DANGLES' k half (the pair's angle gradients summed over the ranks).
The post kernel then does dQ alone and adds DANGLES' q half to what state_terms stored (K_DONE on
stage11's and stage21's post kernels). DKR is neither written nor read: 537 MB less on
N128_P64_R4_C16, and the post kernel's dK half moves into state_terms.

Where it applies: where stage27 rotates inline (:func:`stage27_rotinline.rotates_inline`);
elsewhere this stage is stage27 (so stage26). The post kernels' K_DONE and the finishing
arithmetic are checked on the interpreter and in torch (tests/kernels/test_termsdk.py), the Gluon
kernel compiles for sm_90; the golden check on Hopper is tests/kernels/test_gluonaux.py's (passed
on an H100 at d57951a). Measured there on N128_P64_R4_C16 (records/profile-N128_P64_R4_C16-fusions-
h100-d57951a/): state_terms 695 -> 916 us a launch, post 417 -> 253: 2728 against stage27's 2673
us of kernels. Slower.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage25_subchunk, stage27_rotinline
from mamba3_perf.kernels.registry import StageSpec, register_stage


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's: stage27's, and ``finish_dk`` where it rotates inline."""
    kw = stage27_rotinline.plan(x, meta)
    if kw.get("rot_inline"):
        kw["finish_dk"] = True
    return kw


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage28_termsdk",
    parent="stage27_rotinline",
    summary="the Gluon state_terms finishes dK (inverse rotary, diagonal term, DANGLES' k half) on "
            "rotary block pairs: no DKR rows through HBM; the post kernel does dQ alone",
    entry=run,
    kernels=stage27_rotinline.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
