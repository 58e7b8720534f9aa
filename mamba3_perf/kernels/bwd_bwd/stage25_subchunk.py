"""stage25_subchunk: stage24 with the pre and post kernels on sub-chunks: fewer time steps per
program.

The pre and post kernels (the rotary and its inverse, the diagonal terms, DANGLES; no dots) are
bound by neither memory nor arithmetic: Nsight Compute counted 0.87 GB of DRAM traffic for
stage17's post kernel in 597 us on N128_P64_R4_C16 (1.5 TB/s of the H200's 4.8), 254 registers
and 12 % of the warps active (records/ncu-N128_P64_R4_C16/stage17_scanpass-stalls-raw.csv); the
pre kernel moved 0.60 GB in 299 us. Both hold a chunk's whole [C, R, N] tiles, one or two
programs per SM. Every post kernel reads and writes per-step rows only (a step's C*R fused
scratch rows, its angles, its diagonal weight block), and a chunk's rows are contiguous in every
scratch buffer, so the same kernels launched with C = ``steps`` < C run on sub-chunks: smaller
tiles, more programs per SM, the same arithmetic (common.sub_chunk; prod.launch_post's
``steps``). The pre kernel does too, but for the chunk's decay matrix and decay, which the first
of a chunk's sub-chunk programs stores (stage21's halves kernel, SUB > 1; stage1_pre.launch_pre's
``steps``).

:func:`post_steps` / :func:`post_launch` and :func:`pre_steps` / :func:`pre_launch` are the
rules; ``POST_STEPS``, ``POST_WARPS``, ``PRE_STEPS``, ``PRE_WARPS`` override them for a sweep
(benchmarks/sweep_knob.py). Swept on the H200 (steps 2-8 or the whole chunk, 4 / 8 warps or the
parent's launch; golden passed in every combination; records/h200-sweep-subpost-ebc7982.json,
h200-sweep-subchunk-660cfe8.json), per kernel: [steps, R, N] tiles of 2048 elements on 4 warps
were the best or within a few percent of it, e.g. pre 241 -> 184 us and post 474 -> 384 on
N128_P64_R4_C16, pre 1143 -> 895 and post 1055 -> 841 on N256_P64_R4_C8, pre 475 -> 332 on
N128_P64_R8_C8; the post kernel with DANGLES from registers wants half that tile (91 -> 73 on
N128_P64_R1_C64), and at R = 8 stage11's post kernel lost on every sub-chunk (1176 -> 1248 at
2 steps). Side by side with stage24 and live TileLang on the eleven official cases
(records/h200-subchunk-vs-tilelang-5115862.json, golden 264/264): 1.001-1.075x where the GPU
bounds the time (N128_P32_R4_C16 2.118 -> 1.969 ms, N256_P64_R4_C8 6.799 -> 6.378), 1.017x in
geomean over all eleven (two host-bound there: README), 1.36x slower than TileLang.
"""
from __future__ import annotations

from mamba3_perf.kernels.bwd_bwd import stage7_streamaux, stage13_diagpost, stage21_halves, stage24_gluonaux
from mamba3_perf.kernels.bwd_bwd.common import CHUNK_LAUNCH
from mamba3_perf.kernels.registry import StageSpec, register_stage

# a sweep's overrides of the rules below (None: the rule)
POST_STEPS: int | None = None
POST_WARPS: int | None = None
PRE_STEPS: int | None = None
PRE_WARPS: int | None = None
# the pre / post kernel's programs in (b, chunk, head) order (common.chunk_coords' HEADS_INNER):
# where G < H a chunk's heads read the same q / k rows (the post kernel: for DANGLES and the
# diagonal terms), and program order decides whether L2 serves them once. In (b, head, chunk)
# order a head's programs stream q / k of all chunks of b (8.4 MB on N256_P64_R4_C8) and write
# QR / KR (34 MB) before the next head rereads them: past L2's 50 MB, so every head reads q / k
# from HBM again, ~0.5 GB more for the pre kernel there (a model, not a measurement; `perf
# traffic` counts 0.54 GB of q / k read with no reuse against 34 MB read once, and 2.4 GB
# written: READ_INPUTS below). Measured on the H200 (records/h200-sweep-heads-inner-*-87bed75.json):
# PRE_HEADS_INNER 6.380 -> 6.292 ms on N256_P64_R4_C8 but nothing beside READ_INPUTS=2 (6.112 ->
# 6.111), 2.478 -> 2.505 on N128_P64_R4_C16; POST_HEADS_INNER slower on both. Both stay off
PRE_HEADS_INNER: bool = False
POST_HEADS_INNER: bool = False
# 1: QB, KB, PsiV and dPhiO from the 16-bit inputs on every shape, not only where stage10 measured
# it faster (P <= 64, 32 <= N <= 128; stage10_fewscratch.reads_inputs), a rule measured against
# stage9's kernels; 2: only QB / KB, which only the post kernel reads (where the aux stores the
# diagonal weight blocks, stage13_diagpost.moves_diagonal), PsiV and dPhiO still in scratch for the
# Triton aux. Counted by `perf traffic` (mamba3_perf.analysis.traffic, the interpreter's plan), on
# N256_P64_R4_C8 the pre kernel writes 2.42 GB, 1.34 of them those four buffers (1.07 QB / KB), and
# its time there (895 us) is what 2.4 GB take at ~2.7 TB/s; with 1 the stage's compulsory bytes go
# 13.7 -> 10.8 GB there, 10.2 -> 7.7 on N128_P128_R4_C8, 6.0 -> 4.0 on N64_P128_R4_C16, 2.2 -> 1.2
# on N16_P64_R4_C8. What stage10 measured against it is the Triton aux forming PsiV / dPhiO from
# gathered v / dout rows: ptxas (Triton 3.6, sm_90) counts its spill stores 0 -> 32 B on N256, 392
# -> 1000 on N128_P128, 2100 -> 3882 on N64_P128 (where aux_gluon.WIDE_P would replace it), 184 ->
# 516 on N16; 2 leaves the aux as it is. 0: the rule. Measured on the H200
# (records/h200-sweep-read-inputs-*-87bed75.json, h200-sweep-widep-read-inputs-N64_P128-87bed75.json):
# what won is stage26_widep's rule; the knob stays for sweeps
READ_INPUTS: int = 0


# elements of a sub-chunk's [steps, R, N] tile: measured best on 4 warps (module docstring); the
# post kernel that also forms DANGLES from its rows in registers holds half that
TILE_ELEMS = 2048
REGS_TILE_ELEMS = 1024
MAX_STEPS = 8
SUB_LAUNCH = dict(CHUNK_LAUNCH, num_warps=4)


def _steps(meta, elems: int) -> int:
    return max(1, min(MAX_STEPS, elems // (meta.R * meta.N), meta.C))


def _post_whole(meta) -> bool:
    """Where the post kernel keeps whole chunks and stage18's launch: R >= 8 (stage11's post
    kernel measured slower on every sub-chunk there)."""
    return meta.R >= 8


def _halves_pre(meta) -> bool:
    """Whether stage21 launches its halves pre kernel for ``meta``, the one that takes SUB and
    HEADS_INNER (not at P = 128)."""
    return stage21_halves.pre_kernel(meta) is not None


def post_steps(meta) -> int:
    """Time steps per post program for ``meta``: a [steps, R, N] tile of TILE_ELEMS
    (REGS_TILE_ELEMS for stage21's post kernel with DANGLES from registers), at most MAX_STEPS;
    the whole chunk at R >= 8, where stage11's post kernel measured slower on sub-chunks."""
    if POST_STEPS is not None:
        return min(POST_STEPS, meta.C)
    if _post_whole(meta):
        return meta.C
    regs = stage21_halves.post_kernel(meta) is stage21_halves.bwd_bwd_post_halves_regs_kernel
    return _steps(meta, REGS_TILE_ELEMS if regs else TILE_ELEMS)


def post_launch(meta) -> dict | None:
    """The post kernel's launch options for ``meta`` (None: stage18's choice): 4 warps where
    post_steps' rule applies (R < 8)."""
    if POST_WARPS is not None:
        return dict(CHUNK_LAUNCH, num_warps=POST_WARPS)
    return None if _post_whole(meta) else SUB_LAUNCH


def pre_steps(meta) -> int:
    """Time steps per pre program for ``meta``: a [steps, R, N] tile of TILE_ELEMS, at most
    MAX_STEPS (the whole chunk where stage21 does not launch its halves kernel, the one that runs
    on sub-chunks: P = 128)."""
    if not _halves_pre(meta):
        return meta.C
    if PRE_STEPS is not None:
        return min(PRE_STEPS, meta.C)
    return _steps(meta, TILE_ELEMS)


def pre_launch(meta) -> dict | None:
    """The pre kernel's launch options for ``meta`` (None: stage16's choice): 4 warps, no register
    cap, where its halves kernel runs."""
    if PRE_WARPS is not None:
        return dict(CHUNK_LAUNCH, num_warps=PRE_WARPS)
    return SUB_LAUNCH if _halves_pre(meta) else None


def takes_qk_inputs(meta) -> bool:
    """Whether the pre-rotation q / k alone can come from the inputs for ``meta``
    (stage7_streamaux.run_with's ``qk_inputs``): where the streamed aux folds and stores the
    diagonal weight blocks, so that only the post kernel reads QB / KB."""
    return stage7_streamaux.folds(meta) and stage13_diagpost.moves_diagonal(meta)


def run_with(x: dict, out: dict, meta, **extra) -> None:
    """stage25's pipeline; ``extra``: more stage24_gluonaux.run_with keywords, over this stage's
    (stage26)."""
    kw = dict(post_steps=post_steps(meta), pre_steps=pre_steps(meta))
    if READ_INPUTS == 1:
        kw["inputs"] = True
    elif READ_INPUTS == 2 and takes_qk_inputs(meta):
        kw["qk_inputs"] = True
    if PRE_HEADS_INNER and _halves_pre(meta):
        kw["pre_heads_inner"] = True
    if POST_HEADS_INNER:  # every post kernel stage25 launches (stage11's, stage21's) takes it
        kw["post_heads_inner"] = True
    for name, launch in (("post_launch", post_launch(meta)), ("pre_launch", pre_launch(meta))):
        if launch is not None:
            kw[name] = launch
    stage24_gluonaux.run_with(x, out, meta, **{**kw, **extra})


def run(x: dict, out: dict, meta) -> None:
    run_with(x, out, meta)


STAGE = register_stage(StageSpec(
    name="stage25_subchunk",
    parent="stage24_gluonaux",
    summary="the pre and post kernels on sub-chunks (fewer time steps per program): smaller "
            "tiles, more programs per SM, the same arithmetic",
    entry=run,
    kernels=stage24_gluonaux.STAGE.kernels,
    zero_outputs=False,
))
