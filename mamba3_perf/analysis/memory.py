"""On-chip memory model: per stage and case, the working set of one program, and whether it fits.

The model is data (:data:`STAGE_BUFFERS`): for each stage, each kernel part (fused, pre, aux,
scan, post) lists its live buffers with a shape written in the dimension names
C, R, N, P, CR (= C*R), BN (the scan's N block), TN/TP/BT (stage6's tiles), NB (stage7's
N block), WN (stage15's state pass block), an element size, and where the buffer
lives on a GPU ("regs" for accumulators, "smem" for mma operand tiles). A part's working set
is the sum of its buffers; a stage fits when every part fits the device:

* GPU: the part's "smem" buffers within the shared memory one block may use (H200: 227 KiB;
  Triton fails the launch with OutOfResources beyond it, while registers only spill), and
  the whole working set within shared memory + the SM's register file (227 KiB + 64K x 4 B);
* Ascend NPU: the vector core's Unified Buffer (910B: 192 KiB), which the Triton-Ascend
  lowering stages every tile through.

Buffers are fp32 unless noted. Correct the tables here when a kernel changes; nothing else
encodes the shapes.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from mamba3_perf.analysis.ladder import LADDER
from mamba3_perf.analysis.limits import DeviceSpec
from mamba3_perf.errors import StageError
from mamba3_perf.kernels.cases import Case


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: tuple[str, ...]  # each dim a product of names and integers, e.g. ("CR", "N"), ("2*P",)
    dtype_bytes: int = 4
    where: str = "smem"  # "regs" (accumulator) or "smem" (operand tile) on a GPU
    count: int = 1  # identical buffers (q, k, ...)


def _B(name, shape, count=1, where="smem", dtype_bytes=4) -> Buffer:
    return Buffer(name, tuple(shape), dtype_bytes, where, count)


# The scan holds an N block of BN rows: BN = N except in the N-blocked stages (see dims()).
_SCAN = (
    _B("dstates [BN,P]", ("BN", "P"), where="regs"),
    _B("states tile [BN,P]", ("BN", "P")),
    _B("q, k [CR,BN]", ("CR", "BN"), 2),
    _B("dPhiO, PsiV", ("CR", "P"), 2),
)
_AUX = (
    _B("[CR,CR] (lkq, dkq, ...)", ("CR", "CR"), 3),
    _B("[CR,N] (q, k, dq, dk)", ("CR", "N"), 4),
    _B("[CR,P] (PsiV, dPhiO, dPsiV)", ("CR", "P"), 3),
)
_POST = (_B("[CR,N] (q, k, dq, dk)", ("CR", "N"), 4),)
# The in-register finish (inverse rotary, DANGLES) of the stages before prod swaps the
# rotate-half partners with a 0/1 permutation dot, whose [N,N] operand sits in shared memory;
# prod's post kernel reads its operands from scratch and gathers partners by address.
_PERM = _B("rotate-half permutation [N,N]", ("N", "N"))
_SCAN_FINISH = _SCAN + (_PERM,)

# stage0's loop body (and stage1's scan, which runs the same body on precomputed operands)
_FUSED = (
    _B("dstates", ("N", "P"), where="regs"),
    _B("states tile", ("N", "P")),
    _B("q, k (rotated)", ("CR", "N"), 2),
    _B("q_pre, k_pre (angle gradients only, no dot)", ("CR", "N"), 2, where="regs"),
    _B("PsiV, dPhiO, dPsiV", ("CR", "P"), 3),
    _B("lkq, dkq", ("CR", "CR"), 2),
    _B("dq, dk", ("CR", "N"), 2, where="regs"),
    _PERM,
)

# stage -> kernel part -> buffers of one program of that part.
STAGE_BUFFERS: dict[str, dict[str, tuple[Buffer, ...]]] = {
    # one program per (b, h) does everything in its chunk loop
    "stage0": {"fused": _FUSED},
    # the pre kernel holds the rotated and pre-rotation q/k rows; the scan still does all the
    # chunk-local work of stage0's loop on them
    "stage1_pre": {"pre": (_B("q, k, q_pre, k_pre", ("CR", "N"), 4, where="regs"),),
                   "scan": _FUSED},
    "stage2_aux": {"scan": _SCAN_FINISH, "aux": _AUX},
    # rankfold keeps the shapes (it folds the R=4 rank loop; the buffers are the same)
    "stage3_rankfold": {"scan": _SCAN_FINISH, "aux": _AUX},
    # the N-blocked scan finishes q/k per chunk on whole [CR,N] rows after its block walk
    "stage4_nblock": {"scan": _SCAN, "aux": _AUX, "post": _POST + (_PERM,)},
    "stage5_rankloop": {"scan": _SCAN, "aux": _AUX, "post": _POST + (_PERM,)},
    "prod": {"scan": _SCAN, "aux": _AUX, "post": _POST},
    # the scan is the elementwise recurrence on [32,32] tiles (TN, TP); the dstates terms walk
    # N in blocks of BT rows per chunk (see kernels.bwd_bwd.stage6_statepass)
    "stage6_statepass": {
        "scan": (_B("dstates tile", ("TN", "TP"), where="regs"), _B("q, dPhiO", ("CR", "TN"), 2)),
        "aux": _AUX,
        "post": (_B("dstates, states [BT,P]", ("BT", "P"), 2), _B("k, dk [CR,BT]", ("CR", "BT"), 2),
                 _B("PsiV, dPsiV [CR,P]", ("CR", "P"), 2)),
    },
}
# stage7's streamed aux keeps only [CR,P] and [CR,CR] tiles whole and walks N in blocks of
# NB columns (kernels.bwd_bwd.stage7_streamaux.AUX_NBLOCK); stage8 changes precisions only
_STREAM_AUX = (
    _B("lkq accumulator [CR,CR]", ("CR", "CR"), where="regs"),
    _B("[CR,CR] (dkq, wt, qkd)", ("CR", "CR"), 3),
    _B("[CR,P] (PsiV, dPhiO, dPsiV)", ("CR", "P"), 3),
    _B("[CR,NB] (q, k, dq, dk)", ("CR", "NB"), 4),
    _B("states [NB,P]", ("NB", "P")),
)
STAGE_BUFFERS["stage7_streamaux"] = {**STAGE_BUFFERS["stage6_statepass"], "aux": _STREAM_AUX}
STAGE_BUFFERS["stage8_mixprec"] = STAGE_BUFFERS["stage7_streamaux"]
# stage9 changes state_terms' N block (BT) only: kernels.bwd_bwd.stage9_termsblock
STAGE_BUFFERS["stage9_termsblock"] = STAGE_BUFFERS["stage8_mixprec"]
# stage10 changes where four operands are read from, not what a program holds
STAGE_BUFFERS["stage10_fewscratch"] = STAGE_BUFFERS["stage9_termsblock"]
# stage11 holds the pre kernel's rotary as [C, R, N] instead of [C*R, N]: the same elements
STAGE_BUFFERS["stage11_steptrig"] = STAGE_BUFFERS["stage10_fewscratch"]
# stage12 changes the aux's launch options only
STAGE_BUFFERS["stage12_pipeaux"] = STAGE_BUFFERS["stage11_steptrig"]
# stage13 moves the diagonal terms' pre-rotation q / k tiles from the aux to the post kernel,
# whose [CR,N] tiles this model already counts (neither list names them)
STAGE_BUFFERS["stage13_diagpost"] = STAGE_BUFFERS["stage12_pipeaux"]
# stage14 adds [CR,NB]-sized sum accumulators (registers) to the aux and state_terms
STAGE_BUFFERS["stage14_latesums"] = {
    **STAGE_BUFFERS["stage13_diagpost"],
    "aux": _STREAM_AUX + (_B("DDA_CS sum accumulator [CR,NB]", ("CR", "NB"), where="regs"),),
    "post": STAGE_BUFFERS["stage13_diagpost"]["post"] + (
        _B("DDA_CS_REV, DFACTOR sum accumulators [CR,BT]", ("CR", "BT"), 2, where="regs"),
        _B("DDA sum accumulator [BT,P]", ("BT", "P"), where="regs")),
}
# stage15's state pass holds a transposed [P, BNB] dstates tile and [CR, BNB] / [CR, P] operands
STAGE_BUFFERS["stage15_passwave"] = {
    **STAGE_BUFFERS["stage14_latesums"],
    "scan": (_B("dstates tile [P,WN]", ("P", "WN"), where="regs"), _B("q [CR,WN]", ("CR", "WN")),
             _B("dPhiO [CR,P]", ("CR", "P"))),
}
# stage16 caps registers (launch options only): the same buffers
STAGE_BUFFERS["stage16_regcap"] = STAGE_BUFFERS["stage15_passwave"]
# stage17's scan holds a [SCAN_BLOCK] run and three terms per program, its increment kernel
# stage15's pass operands without the loop: the pass's buffers bound both
STAGE_BUFFERS["stage17_scanpass"] = STAGE_BUFFERS["stage16_regcap"]
# stage18 launches the pre and post kernels on more warps: the same buffers
STAGE_BUFFERS["stage18_widechunk"] = STAGE_BUFFERS["stage17_scanpass"]
# stage19 writes the tf32x3 passes out: the same operand splits, the same buffers
STAGE_BUFFERS["stage19_splitdot"] = STAGE_BUFFERS["stage18_widechunk"]
# stage20's aux also holds (dPhiO exp(da_cs))^T and an increment block; its pass is the scan alone
STAGE_BUFFERS["stage20_auxinc"] = {
    **STAGE_BUFFERS["stage19_splitdot"],
    "aux": STAGE_BUFFERS["stage19_splitdot"]["aux"] + (
        _B("(dPhiO e)^T [P,CR]", ("P", "CR")), _B("increment block [P,NB]", ("P", "NB"), where="regs")),
}
# stage21 holds the pre and post kernels' rows as two halves: the same elements
STAGE_BUFFERS["stage21_halves"] = STAGE_BUFFERS["stage20_auxinc"]
# stage22's aux loads [CR, 2 NB] k / q blocks in its first loop: within its second loop's tiles
STAGE_BUFFERS["stage22_lkqblock"] = STAGE_BUFFERS["stage21_halves"]
# stage23's Gluon state_terms holds no more than stage22's (its ring of N blocks is shared memory)
STAGE_BUFFERS["stage23_gluonterms"] = STAGE_BUFFERS["stage22_lkqblock"]
# stage24's Gluon aux stages its loop-invariant operands in shared memory, not more registers
STAGE_BUFFERS["stage24_gluonaux"] = STAGE_BUFFERS["stage23_gluonterms"]
# stage25 runs the post kernel on fewer steps per program: no buffer larger than stage24's
STAGE_BUFFERS["stage25_subchunk"] = STAGE_BUFFERS["stage24_gluonaux"]
# stage26 takes the Gluon aux at P = 128 (its operands in shared memory) and reads inputs: no more
STAGE_BUFFERS["stage26_widep"] = STAGE_BUFFERS["stage25_subchunk"]
# stage27's Gluon kernels rotate [M, NB] blocks in registers from 16-bit boxes of the same bytes
STAGE_BUFFERS["stage27_rotinline"] = STAGE_BUFFERS["stage26_widep"]
# stage28's state_terms holds a pair's first-half dK rows [M, NB] across one step: within its tiles
STAGE_BUFFERS["stage28_termsdk"] = STAGE_BUFFERS["stage27_rotinline"]
# stage29's aux likewise holds a pair's first-half dQ rows [M, NB] across one step
STAGE_BUFFERS["stage29_auxdq"] = STAGE_BUFFERS["stage28_termsdk"]
# stage30 is stage26 with the aux's descriptors formed per step: the same buffers
STAGE_BUFFERS["stage30_stepdesc"] = STAGE_BUFFERS["stage26_widep"]
# stage31's state_terms takes two chunks of 32 rows on its 64: the same scratch buffers
STAGE_BUFFERS["stage31_chunkpairs"] = STAGE_BUFFERS["stage30_stepdesc"]
# stage32 moves values between threads before its transposed copies: the same buffers
STAGE_BUFFERS["stage32_banks"] = STAGE_BUFFERS["stage31_chunkpairs"]
# stage33 sums the same chunk parts on a wider grid: the same buffers
STAGE_BUFFERS["stage33_chunksum"] = STAGE_BUFFERS["stage32_banks"]
# stage34 launches the same post kernel on sub-chunks: the same buffers
STAGE_BUFFERS["stage34_poststeps"] = STAGE_BUFFERS["stage33_chunksum"]
# stage37 splits the same dots into other parts: the same buffers
STAGE_BUFFERS["stage37_bf16split"] = STAGE_BUFFERS["stage34_poststeps"]
STAGE_BUFFERS["stage38_bf16aux"] = STAGE_BUFFERS["stage34_poststeps"]
STAGE_BUFFERS["stage39_auxregs"] = STAGE_BUFFERS["stage34_poststeps"]
STAGE_BUFFERS["stage40_termsring"] = STAGE_BUFFERS["stage34_poststeps"]
STAGE_BUFFERS["stage41_streamregs"] = STAGE_BUFFERS["stage34_poststeps"]
STAGE_BUFFERS["stage42_precap"] = STAGE_BUFFERS["stage34_poststeps"]
# stage43's Gluon kernels hold a pair's dQ / dK rows within their tiles, as stage28-29's do: stage42's buffers
STAGE_BUFFERS["stage43_finish"] = STAGE_BUFFERS["stage42_precap"]
STAGE_BUFFERS["stage45_diagfold"] = STAGE_BUFFERS["stage43_finish"]
# The N-blocked scan splits N into blocks of NBLOCK_BN only when N*P exceeds this.
NBLOCK_THRESHOLD = 8192
NBLOCK_BN = 64
NBLOCK_STAGES = ("stage4_nblock", "stage5_rankloop", "prod")


def dims(stage: str, case: Case) -> dict[str, int]:
    """The dimension values the shape formulas of ``stage`` use for ``case``."""
    bn = case.N
    if stage in NBLOCK_STAGES and case.N * case.P > NBLOCK_THRESHOLD:
        bn = min(NBLOCK_BN, case.N)
    from mamba3_perf.kernels.bwd_bwd import stage6_statepass as s6
    from mamba3_perf.kernels.bwd_bwd.common import pow2
    from mamba3_perf.kernels.bwd_bwd.stage7_streamaux import AUX_NBLOCK
    from mamba3_perf.kernels.bwd_bwd.stage9_termsblock import terms_choice
    from mamba3_perf.kernels.bwd_bwd.stage15_passwave import wave_block

    tn, tp = s6.pass_tiles(case)
    narrow_terms = stage in LADDER and LADDER.index(stage) >= LADDER.index("stage9_termsblock")
    terms = terms_choice(case) if narrow_terms else {}
    bt = s6.terms_block(case, terms.get("tile_elems", s6.TERMS_TILE_ELEMS))
    return {"C": case.C, "R": case.R, "N": case.N, "P": case.P, "CR": case.C * case.R, "BN": bn,
            "TN": tn, "TP": tp, "BT": bt, "NB": min(AUX_NBLOCK, pow2(case.N)), "WN": wave_block(case)}


def _dim(expr: str, env: dict[str, int]) -> int:
    v = 1
    for tok in expr.split("*"):
        tok = tok.strip()
        v *= int(tok) if tok.isdigit() else env[tok]
    return v


def buffer_table(stage: str, case: Case) -> pd.DataFrame:
    """One row per buffer of every part of ``stage``: part, name, shape, count, where, bytes."""
    if stage not in STAGE_BUFFERS:
        raise StageError(f"no memory model for stage {stage!r}; modelled: {', '.join(STAGE_BUFFERS)}")
    env = dims(stage, case)
    rows = []
    for part, bufs in STAGE_BUFFERS[stage].items():
        for b in bufs:
            shape = [_dim(d, env) for d in b.shape]
            n = 1
            for s in shape:
                n *= s
            rows.append({"part": part, "name": b.name, "shape": "x".join(map(str, shape)),
                         "count": b.count, "where": b.where,
                         "bytes": n * b.dtype_bytes * b.count})
    return pd.DataFrame(rows, columns=["part", "name", "shape", "count", "where", "bytes"])


def working_set(stage: str, case: Case) -> dict[str, int]:
    """Bytes per program for each kernel part of ``stage``."""
    t = buffer_table(stage, case)
    return {str(k): int(v) for k, v in t.groupby("part", sort=False)["bytes"].sum().items()}


def budget_bytes(device: DeviceSpec) -> int:
    """On-chip bytes one program may hold in all (see the module docstring)."""
    if device.kind == "npu":
        return device.ub_bytes
    return device.smem_per_block_bytes + device.registers_per_sm * 4


def smem_bytes(stage: str, case: Case) -> dict[str, int]:
    """Bytes of shared-memory operand tiles per kernel part of ``stage``."""
    t = buffer_table(stage, case)
    t = t[t["where"] == "smem"]
    return {str(k): int(v) for k, v in t.groupby("part", sort=False)["bytes"].sum().items()}


def predict_runnable(stage: str, case: Case, device: DeviceSpec) -> tuple[bool, str]:
    """(fits, reason): whether every part of ``stage`` fits ``device`` (module docstring)."""
    ws = working_set(stage, case)
    part, need = max(ws.items(), key=lambda kv: kv[1])
    budget = budget_bytes(device)
    if device.kind == "npu":
        rel = "<=" if need <= budget else ">"
        return need <= budget, (f"{part} working set {need / 1024:.1f} KiB {rel} "
                                f"{budget / 1024:.0f} KiB UB on {device.name}")
    sm = smem_bytes(stage, case)
    spart, sneed = max(sm.items(), key=lambda kv: kv[1]) if sm else (part, 0)
    limit = device.smem_per_block_bytes
    if sneed > limit:
        return False, (f"{spart} shared-memory tiles {sneed / 1024:.1f} KiB > {limit / 1024:.0f} KiB "
                       f"per block on {device.name}")
    rel = "<=" if need <= budget else ">"
    return need <= budget, (f"{part} working set {need / 1024:.1f} KiB {rel} {budget / 1024:.0f} KiB "
                            f"shared memory + registers on {device.name} (shared-memory tiles "
                            f"{sneed / 1024:.1f} KiB <= {limit / 1024:.0f} KiB)")


PREDICTION_COLUMNS = ("stage", "case_id", "device", "predicted_runnable", "working_set_bytes",
                      "budget_bytes", "reason")


def predictions(stages, cases, device: DeviceSpec) -> pd.DataFrame:
    """:func:`predict_runnable` for every stage x case, as a frame."""
    rows = []
    for st in stages:
        for c in cases:
            fits, why = predict_runnable(st, c, device)
            rows.append({"stage": st, "case_id": c.id, "device": device.name,
                         "predicted_runnable": fits,
                         "working_set_bytes": max(working_set(st, c).values()),
                         "budget_bytes": budget_bytes(device), "reason": why})
    return pd.DataFrame(rows, columns=list(PREDICTION_COLUMNS))


def check_predictions(pred_df: pd.DataFrame, timings_df: pd.DataFrame) -> pd.DataFrame:
    """Join predictions with measured outcomes (status "not runnable" = did not fit).

    Adds ``status``, ``actual_reason``, ``actual_runnable`` and ``outcome``: "agree",
    "predicted fit, not runnable", "predicted no fit, ran", or "not timed".
    """
    t = timings_df[["variant", "case_id", "status", "reason"]].rename(
        columns={"variant": "stage", "reason": "actual_reason"})
    m = pred_df.merge(t, on=["stage", "case_id"], how="left")
    timed = m["status"].notna()
    actual = (m["status"] != "not runnable") & timed
    m["actual_runnable"] = actual.where(timed).astype("boolean")
    pred = m["predicted_runnable"].astype(bool)
    m["outcome"] = "agree"
    m.loc[timed & pred & ~actual, "outcome"] = "predicted fit, not runnable"
    m.loc[timed & ~pred & actual, "outcome"] = "predicted no fit, ran"
    m.loc[~timed, "outcome"] = "not timed"
    m["outcome"] = m["outcome"].astype("string")
    return m
