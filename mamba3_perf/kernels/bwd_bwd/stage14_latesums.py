"""stage14_latesums: the N sums of the streamed aux and state_terms are reduced across lanes once.

DDA_CS (in the aux), DDA_CS_REV, DFACTOR and DDA (in state_terms) are sums over all N of
elementwise products that both kernels form one 16-column block at a time; stages 7-13 reduce
each block's products across the columns at once (a row sum, and for DDA a whole-tile sum),
so every block pays the butterfly shuffles of a cross-lane reduction: 78 SHFL.BFLY of the 912
instructions in state_terms' N-block loop at N128_P64_R4_C16 (SASS for sm_90, Triton 3.6). Here
each kernel adds the block's products into an elementwise accumulator ([C*R, 16], and [16, P]
for DDA) and reduces it once after its N loop. Everything else is stage13.

Measured on the H200 with the late sums on every shape (records/h200-diagpost-latesums-153be00.json,
stage13 / stage14 device time): 1.002-1.018x on the eight official and regular shapes with
P <= 64 and N >= 64 (state_terms 1157 -> 1114 us on N128_P64_R4_C16; its executed instructions
202 M -> 191 M, ncu), 0.92x and 0.98x at P = 128 (the [16, 128] DDA accumulator on one
warpgroup), 0.99x and 1.00x at N = 16 and 32 (one or two N blocks: little to save). So
:func:`sums_late` takes them only where P <= 64 and N >= 64; elsewhere this stage is stage13.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage11_steptrig, stage12_pipeaux, stage13_diagpost
from mamba3_perf.kernels.registry import StageSpec, register_stage


def sums_late(meta) -> bool:
    """Whether the N sums are reduced once for ``meta``: P <= 64 and N >= 64, where that
    measured faster than stage13 (module docstring)."""
    return meta.P <= 64 and meta.N >= 64


def run(x: dict, out: dict, meta) -> None:
    stage11_steptrig.run_with(x, out, meta, aux_launch=stage12_pipeaux.aux_launch(meta),
                              diag_blocks=stage13_diagpost.moves_diagonal(meta), late_sums=sums_late(meta))


STAGE = register_stage(StageSpec(
    name="stage14_latesums",
    parent="stage13_diagpost",
    summary="the aux's and state_terms' sums over N accumulate elementwise across the N blocks "
            "and are reduced across lanes once, not once per block",
    entry=run,
    kernels=stage13_diagpost.STAGE.kernels,
    zero_outputs=False,
))
