"""stage32_banks: stage31 with the tiles both Gluon kernels copy transposed into shared memory held
in register layouts that copy them at their ideal shared-memory wavefronts.

For TF32 both wgmma operands must be K-major, so each Gluon kernel copies some tiles transposed
from registers into shared memory: the aux dPhiO's TF32 parts and (dPhiO exp(da_cs))^T once a
chunk, and in every step of its second N walk the block's q and ks parts; state_terms every
step's dstates parts (the B operand of ks dstates). Held in the ROW layout (each thread four
consecutive columns of a row), a transposed store writes a column of the swizzled buffer per
lane group: Nsight Compute measured those stores at two wavefronts where one would do (aux) and
about 2.5x (state_terms' dstates) on stage26 (README, "Where the Gluon kernels' instructions go").
``mamba3_perf.analysis.banks`` counts them statically, for every register <-> shared copy of a
kernel compiled for sm_90 here: 2x for the walk's q / ks parts, 4x for the [M, P] parts and
state_terms' dstates parts (its model agrees with Triton's own bank-conflict count on every
copy).

Here (``aux_gluon.TRANSPOSE_LAYOUTS`` / ``terms_gluon.TRANSPOSE_LAYOUTS``, the kernels' TL) those
tiles are held in layouts whose lanes run down the copied rows: the aux's [M, P] parts and walk
tiles with the 32 lanes over 32 rows and a 16-byte vector each along the row (TT, TW: the load
from the row-major buffer or TMA box 16 bytes a lane, the transposed store a whole 128-byte line
a warp), state_terms' [BNB, P] dstates / states blocks with the lanes along P and each thread
BNB / num_warps rows of a column (the load and the straight copies a line a warp, the transposed
copies 16 bytes a lane). Every one of those copies then runs at its ideal wavefronts; only
values move between threads, the arithmetic is the same (the DDA sum adds its terms in another
order). Static, sm_90, Triton 3.6 (``benchmarks/ptxas_stage.py stage32_banks N P R C --sass
--banks`` against stage30_stepdesc): the aux's second walk 566 -> 481 SASS a step at N128_P64
(shared-memory instructions 64 -> 18), 750 -> 639 at P = 128, 547 -> 452 at P = 32, no spills at
P <= 64; state_terms' walk within a few instructions of stage30's, its copies 4x fewer
wavefronts. On an H100 (benchmarks/sweep_knob.py --stage stage30_stepdesc --knob
aux_gluon.TRANSPOSE_LAYOUTS=0,1 --knob terms_gluon.TRANSPOSE_LAYOUTS=0,1, golden in every
combination, records/h100-sweep-layouts-1273703.json): 5.3 % faster on N128_P64_R4_C16 (the aux
-9 %, state_terms -5 %), 5.4 % on N64_P128_R4_C16; state_terms' layouts 1.5 % on
N256_P64_R4_C8. Against TileLang side by side on the H100's official grid: 1.187x slower in
geomean, golden 132/132 (records/h100-banks-vs-tilelang-1273703.json).

Elsewhere (the Triton kernels' shapes and devices) this stage is stage31 (itself stage30 but
where a chunk has C*R = 32 fused rows).
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage25_subchunk, stage31_chunkpairs
from mamba3_perf.kernels.registry import StageSpec, register_stage


def plan(x: dict, meta) -> dict:
    """This stage's keywords over stage25's: stage31's and both Gluon kernels' ``transpose_layouts``."""
    return dict(stage31_chunkpairs.plan(x, meta), transpose_layouts=True)


def run(x: dict, out: dict, meta) -> None:
    stage25_subchunk.run_with(x, out, meta, **plan(x, meta))


STAGE = register_stage(StageSpec(
    name="stage32_banks",
    parent="stage31_chunkpairs",
    summary="stage31 with the tiles both Gluon kernels copy transposed into shared memory held in "
            "register layouts that copy them at their ideal wavefronts (no bank conflicts)",
    entry=run,
    kernels=stage31_chunkpairs.STAGE.kernels,
    zero_outputs=False,
    hopper_only=True,
))
