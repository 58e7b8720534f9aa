"""Shared Triton helpers of the bwd_bwd stages: index sets, rotary, rank folding.

Conventions (all stages): one chunk's rows are fused as i = t*R + r (t the step inside the
chunk, r the MIMO rank), as upstream does; all tensors are contiguous and indexed from their
sizes; S is the padded length (S % C == 0); arithmetic and dots are fp32, every dot through
:func:`fdot` with the precision PREC ("ieee" by default, so results meet the fp32 golden
criterion).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math

import torch
import triton
import triton.language as tl


def dot_precision(device, *, low: bool = False, aux: bool = False) -> str:
    """Input precision of the fp32 dots on ``device``: "tf32x3" on CUDA (three TF32
    tensor-core passes, fp32-level error; the "ieee" FMA dots unroll into code that spills
    tens of KB per thread and compiles for minutes) and "ieee" elsewhere (interpreter, Ascend).
    ``low``: one TF32 pass on CUDA (operands rounded to 10 mantissa bits), for the dots
    :func:`split_precisions` finds only 16-bit-level outputs depend on. Inside
    :func:`forced_dot_precision` every dot gets the precision forced there, on any device;
    inside :func:`split_tf32x3` the fp32-level dots get SPLIT_TF32X3 (``aux``: the streamed
    aux's dots, which the context may leave out)."""
    forced = _FORCED_PRECISION.get()
    if forced is not None:
        return forced
    if torch.device(device).type != "cuda":
        return "ieee"
    if low:
        return "tf32"
    if _SPLIT_BF16.get():
        return SPLIT_BF16X3
    split, split_aux = _SPLIT.get()
    return SPLIT_TF32X3 if split and (split_aux or not aux) else "tf32x3"


def is_hopper(device) -> bool:
    """Whether ``device`` is a CUDA GPU of compute capability 9 (H100, H200): where the Gluon
    kernels (sm_90 wgmma and TMA; stage23 on) run."""
    dev = torch.device(device)
    return dev.type == "cuda" and _capability_major(
        torch.cuda.current_device() if dev.index is None else dev.index) == 9


# rows of every wgmma product of the Gluon kernels: a warpgroup's least (chunks of C*R = 32 fused
# rows run on 64)
WG_ROWS = 64


def chunks_per_program(meta, pairs: bool) -> int:
    """The Gluon kernels' CP: 2 where ``pairs`` and a chunk has C*R = 32 fused rows and the
    sequence an even number of chunks (two adjacent chunks fill the WG_ROWS rows), else 1."""
    return 2 if pairs and meta.C * meta.R * 2 == WG_ROWS and meta.nchunks % 2 == 0 else 1


@functools.lru_cache(maxsize=None)
def _capability_major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]  # asked once per device: a host call per launch otherwise


DOT_PRECISIONS = ("tf32", "tf32x3", "ieee")  # what tl.dot's input_precision takes here
# fdot's own precisions: tf32x3's three TF32 passes, split by hand (stage19_splitdot), and three
# bf16 passes over bf16 high / low parts (stage37_bf16split)
SPLIT_TF32X3 = "tf32x3split"
SPLIT_BF16X3 = "bf16x3split"
_FORCED_PRECISION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "forced_dot_precision", default=None)
_SPLIT: contextvars.ContextVar[tuple[bool, bool]] = contextvars.ContextVar("split_tf32x3",
                                                                          default=(False, False))
_SPLIT_BF16: contextvars.ContextVar[bool] = contextvars.ContextVar("split_bf16x3", default=False)


@contextlib.contextmanager
def split_tf32x3(*, aux: bool = True):
    """Inside, :func:`dot_precision` answers SPLIT_TF32X3 where it would answer "tf32x3": the
    stage launched there runs its fp32-level dots as :func:`fdot`'s hand-split three TF32
    passes instead of Triton's (stage19_splitdot); ``aux=False`` leaves the streamed aux's dots
    to Triton. Other devices and the low dots: unchanged."""
    token = _SPLIT.set((True, aux))
    try:
        yield
    finally:
        _SPLIT.reset(token)


@contextlib.contextmanager
def split_bf16x3():
    """Inside, :func:`dot_precision` answers SPLIT_BF16X3 wherever it would answer "tf32x3" or
    SPLIT_TF32X3 (the streamed aux's dots included, :func:`split_tf32x3` inside or not): every
    fp32-level dot of the Triton kernels launched there as :func:`fdot`'s three bf16 passes, half
    the tensor work of three TF32 passes (stage37_bf16split; analysis.precision measured that the
    golden criterion holds). Other devices ("ieee") and the low dots (one TF32 pass): unchanged.
    The Gluon kernels split by themselves and read the same scope (terms_gluon; aux_gluon behind
    its BF16 knob) through dot_precision."""
    token = _SPLIT_BF16.set(True)
    try:
        yield
    finally:
        _SPLIT_BF16.reset(token)


@contextlib.contextmanager
def forced_dot_precision(precision: str | None):
    """Every stage launched inside runs all its dots at ``precision`` (None: as it chooses).

    A measuring tool, not a ladder step: ``"tf32"`` puts every product at one TF32 pass, the
    accuracy class of upstream TileLang's bf16 GEMMs, so a benchmark can show what the stages'
    fp32-level dots cost (variant ``STAGE@tf32``: :func:`mamba3_perf.kernels.checking.run_stage`);
    such a run fails the golden criterion on the fp32-level outputs, and says so."""
    if precision is not None and precision not in DOT_PRECISIONS:
        raise ValueError(f"dot precision {precision!r}: expected one of {', '.join(DOT_PRECISIONS)}")
    token = _FORCED_PRECISION.set(precision)
    try:
        yield
    finally:
        _FORCED_PRECISION.reset(token)


HALF_DTYPES = (torch.float16, torch.bfloat16)


def split_precisions(x: dict, *, low: bool) -> dict:
    """PREC / PLO / PQ constexprs of a kernel that takes the precision split (stage8_mixprec).

    PREC: dots an fp32-level output needs: k.q^T and PsiV.dPhiO^T (DSSDA), dK (DFACTOR,
    DDA_CS_REV), dPsiV (DMIMO_V, whose fp32 reference error can sit far below the inputs'
    rounding: 3e-5 on pw-1). PLO: the qk_dot diagonal terms, which reach only DQ and DK, stored
    in the 16-bit input dtype: low where the inputs are fp16/bf16. PQ: the two terms of dQ in the
    rotated domain (intra-chunk and cached-state), which also reach DANGLES and DDA_CS: those
    outputs are fp32, but with fp16/bf16 cached states their fp32 reference already carries the
    states' rounding through the cached-state term, which sets their error floor (~1e-3): low
    only then (upstream's contract for fp16/bf16 inputs). That a TF32 pass stays under that
    floor is measured, not derived: tests/kernels/test_mixprec.py. ``low=False``: PREC
    everywhere.
    """
    dev = x["q"].device
    half = low and x["q"].dtype in HALF_DTYPES
    return dict(PREC=dot_precision(dev, aux=True), PLO=dot_precision(dev, low=half, aux=True),
                PQ=dot_precision(dev, low=half and x["states"].dtype in HALF_DTYPES, aux=True))


# Launch options of the kernels that loop over chunks: no software pipelining of the loop
# (its multi-buffered shared memory is what makes the fused scan overflow 227 KB on Hopper),
# and 8 warps: the fp32 [C*R, N] tiles of one chunk spill from 4 warps' registers (ptxas for
# sm_90 at N=P=64, R=4, C=16: 2-3 KB of spill stores per thread at 4 warps, about half at 8).
LOOP_LAUNCH = dict(num_warps=8, num_stages=1)
# Kernels on a (B, H, nchunks) grid: the same register argument, software pipelining allowed.
CHUNK_LAUNCH = dict(num_warps=8)


@triton.jit
def tf32_split(x):
    """fp32 ``x`` as hi + lo, exactly: hi rounded to TF32 (10 mantissa bits; to nearest, ties
    away from zero, as PTX's cvt.rna.tf32.f32 rounds finite values), lo = x - hi, whose own
    TF32 truncation in the tensor core costs ~2^-21 |x|."""
    bits = x.to(tl.uint32, bitcast=True)
    hi = ((bits + 0x1000) >> 13 << 13).to(tl.float32, bitcast=True)
    return hi, x - hi


@triton.jit
def bf16_split(x):
    """fp32 ``x`` as bf16 hi + lo: hi = x rounded to bf16, lo = (x - hi) rounded to bf16 (16
    significant bits of x in all, where TF32's split keeps 22)."""
    hi = x.to(tl.bfloat16)
    return hi, (x - hi.to(tl.float32)).to(tl.bfloat16)


@triton.jit
def fdot(a, b, PREC: tl.constexpr):
    """a @ b at precision PREC: tl.dot's input_precision, or SPLIT_TF32X3: the three TF32
    passes of tf32x3 (lo.hi, hi.lo, then hi.hi, in Triton's order, Triton's own split rounding)
    chained on one accumulator, without the NaN guard Triton puts on the partial sum before the
    last pass (64 compares and selects per thread on a [64, 64] result) and without the wait on
    each pass (stage19_splitdot); or SPLIT_BF16X3: the same three passes over :func:`bf16_split`'s
    parts on the bf16 tensor rate, twice TF32's (stage37_bf16split). Triton's interpreter
    multiplies bf16 dot operands as their bit patterns (Triton 3.6-3.9), so SPLIT_BF16X3 runs on
    GPUs only, which is where dot_precision answers it."""
    if PREC == "tf32x3split":
        a_hi, a_lo = tf32_split(a)
        b_hi, b_lo = tf32_split(b)
        acc = tl.dot(a_lo, b_hi, input_precision="tf32")
        acc = tl.dot(a_hi, b_lo, acc, input_precision="tf32")
        acc = tl.dot(a_hi, b_hi, acc, input_precision="tf32")
    elif PREC == "bf16x3split":
        a_hi, a_lo = bf16_split(a)
        b_hi, b_lo = bf16_split(b)
        acc = tl.dot(a_lo, b_hi)
        acc = tl.dot(a_hi, b_lo, acc)
        acc = tl.dot(a_hi, b_hi, acc)
    else:
        acc = tl.dot(a, b, input_precision=PREC)
    return acc


def pow2(x: int, lo: int = 16) -> int:
    """Block size for a dim: next power of two, at least ``lo`` (tl.dot needs >= 16)."""
    return max(lo, triton.next_power_of_2(int(x)))


def blocks(meta) -> dict:
    """The constexpr block sizes every stage uses."""
    return dict(_blocks(meta.N, meta.P, meta.RD))


@functools.lru_cache(maxsize=None)
def _blocks(N: int, P: int, RD: int) -> tuple:
    return (("BN", pow2(N)), ("BP", pow2(P)), ("BRD", pow2(RD)))


def scalar_ptr_or_dummy(t, like: torch.Tensor):
    """Triton needs a pointer for an absent optional tensor (never read: HAS_* flags guard it)."""
    return t if t is not None else like


@triton.jit
def rot_cols(N, RD, BN: tl.constexpr):
    """Per column n of a [*, BN] q/k tile: partner column (n +- N/2), sign of the partner term,
    angle index, and whether the column is rotated (rotate-half on [0,RD) and [N/2, N/2+RD))."""
    n = tl.arange(0, BN)
    half = N // 2
    first = n < RD
    second = (n >= half) & (n < half + RD)
    partner = tl.where(first, n + half, tl.where(second, n - half, n))
    sgn = tl.where(first, -1.0, tl.where(second, 1.0, 0.0))
    jn = tl.where(first, n, tl.where(second, n - half, 0))
    rot = first | second
    return n, partner, sgn, jn, rot


@triton.jit
def load_qk_rotated(X, BIAS, ANG, b, h, hq, tpos, ri, n, partner, sgn, jn, rot,
                    S, H, G, N, RD, R: tl.constexpr):
    """q or k rows of one chunk: (pre-rotation xb, its partner columns, rotated xr, cos, sin).

    X: [B,S,R,G,N]; BIAS: [H,R,N] fp32; ANG: [B,S,H,RD] fp32; rows (tpos, ri).
    """
    mn = n < N
    row = ((b * S + tpos[:, None]) * R + ri[:, None]) * G + hq
    brow = (h * R + ri[:, None]) * N
    x = tl.load(X + row * N + n[None, :], mask=mn[None, :], other=0.0).to(tl.float32)
    x += tl.load(BIAS + brow + n[None, :], mask=mn[None, :], other=0.0)
    xp = tl.load(X + row * N + partner[None, :], mask=mn[None, :], other=0.0).to(tl.float32)
    xp += tl.load(BIAS + brow + partner[None, :], mask=mn[None, :], other=0.0)
    a = tl.load(ANG + ((b * S + tpos[:, None]) * H + h) * RD + jn[None, :],
                mask=(rot & mn)[None, :], other=0.0)
    cs = tl.cos(a)
    sn = tl.sin(a)
    xr = cs * x + sgn[None, :] * sn * xp
    return x, xp, xr, cs, sn


@triton.jit
def swap_halves(x, partner, BN: tl.constexpr, PREC: tl.constexpr):
    """x[:, partner(n)] for every column n, as a 0/1 permutation dot."""
    m = tl.arange(0, BN)
    perm = (m[:, None] == partner[None, :]).to(tl.float32)
    return fdot(x, perm, PREC)


@triton.jit
def unrotate(dxr, partner, sgn, cs, sn, BN: tl.constexpr, PREC: tl.constexpr):
    """Gradient w.r.t. the pre-rotation input from the gradient w.r.t. the rotated one."""
    return cs * dxr - sgn[None, :] * sn * swap_halves(dxr, partner, BN, PREC)


@triton.jit
def angle_grad_cols(dxr, x, xp, sgn, cs, sn):
    """Per column contribution to d(angle): dxr * d(xr)/d(angle)."""
    return dxr * (-sn * x + sgn[None, :] * cs * xp)


@triton.jit
def fold_angles(g, jn, rot, RD, BN: tl.constexpr, BRD: tl.constexpr, PREC: tl.constexpr):
    """[rows, BN] per-column angle gradients -> [rows, BRD] per angle (sum of each pair)."""
    jj = tl.arange(0, BRD)
    fold = ((jn[:, None] == jj[None, :]) & rot[:, None] & (jj[None, :] < RD)).to(tl.float32)
    return fdot(g, fold, PREC)


@triton.jit
def rows_to_time(x, C: tl.constexpr, R: tl.constexpr, X: tl.constexpr):
    """[C*R, X] -> [C, X], summing the R ranks of each step."""
    return tl.sum(tl.reshape(x, (C, R, X)), axis=1)


@triton.jit
def vec_to_time(x, C: tl.constexpr, R: tl.constexpr):
    """[C*R] -> [C], summing the R ranks of each step."""
    return tl.sum(tl.reshape(x, (C, R)), axis=1)


@triton.jit
def block_to_time(x, C: tl.constexpr, R: tl.constexpr):
    """[C*R, C*R] -> [C, C], summing both rank pairs."""
    return tl.sum(tl.sum(tl.reshape(x, (C, R, C, R)), axis=3), axis=1)


@triton.jit
def step_scalars(DT, TRAP, DACS, DACSREV, bh, tpos, S):
    """Per-row discretization: gamma, trap_scale, exp(da_cs), exp(da_cs_rev). TRAP in its own
    dtype (16-bit as the benchmarks and upstream keep it), widened here: the API converts no copy
    of it per call."""
    dt = tl.load(DT + bh * S + tpos)
    tr = tl.load(TRAP + bh * S + tpos).to(tl.float32)
    nxt = tpos + 1
    dt1 = tl.load(DT + bh * S + nxt, mask=nxt < S, other=0.0)
    tr1 = tl.load(TRAP + bh * S + nxt, mask=nxt < S, other=0.0).to(tl.float32)
    gamma = dt * tl.sigmoid(tr)
    ts = gamma + dt1 * tl.sigmoid(-tr1)
    ecs = tl.exp(tl.load(DACS + bh * S + tpos))
    erev = tl.exp(tl.load(DACSREV + bh * S + tpos))
    return gamma, ts, ecs, erev


@triton.jit
def store_chunk_scalars(DT, TRAP, DACS, DACSREV, SEGSUM, GAM_S, TS_S, ECS_S, EREV_S, WT_S, DECAY_S,
                        bh, bhc, c, tc, S, C: tl.constexpr):
    """The pre kernel's per-step and per-chunk scratch: gamma, trap_scale, exp(da_cs),
    exp(da_cs_rev) [C]; the masked decay matrix [C(k), C(q)]; the chunk decay."""
    store_step_scalars(DT, TRAP, DACS, DACSREV, GAM_S, TS_S, ECS_S, EREV_S, bh, c * C + tc, S)
    store_chunk_decay(DACS, SEGSUM, WT_S, DECAY_S, bh, bhc, c, S, C)


@triton.jit
def store_step_scalars(DT, TRAP, DACS, DACSREV, GAM_S, TS_S, ECS_S, EREV_S, bh, tpos, S):
    """gamma, trap_scale, exp(da_cs), exp(da_cs_rev) of the steps at positions ``tpos``."""
    gamma, ts, ecs, erev = step_scalars(DT, TRAP, DACS, DACSREV, bh, tpos, S)
    tl.store(GAM_S + bh * S + tpos, gamma)
    tl.store(TS_S + bh * S + tpos, ts)
    tl.store(ECS_S + bh * S + tpos, ecs)
    tl.store(EREV_S + bh * S + tpos, erev)


@triton.jit
def store_chunk_decay(DACS, SEGSUM, WT_S, DECAY_S, bh, bhc, c, S, C: tl.constexpr):
    """Chunk ``c``'s (program ``bhc``'s) masked decay matrix [C(k), C(q)] and its decay."""
    tc = tl.arange(0, C)
    tl.store(WT_S + (bhc * C + tc[:, None]) * C + tc[None, :], wt_from_segsum(SEGSUM, bhc, tc, C))
    tl.store(DECAY_S + bhc, tl.exp(tl.load(DACS + bh * S + c * C + C - 1)))


@triton.jit
def load_psiv_dphio(DOUT, V, MV, MO, b, h, tpos, ri, p, S, H, P,
                    R: tl.constexpr, REDUCE_O: tl.constexpr):
    """v rows [CR,BP], PsiV = v*mimo_v[r], Psi rows, dPhiO (reduce-O or per-rank dout)."""
    mp = p < P
    vrow = ((b * S + tpos[:, None]) * H + h) * P + p[None, :]
    v = tl.load(V + vrow, mask=mp[None, :], other=0.0).to(tl.float32)
    psi = tl.load(MV + (h * R + ri[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
    if REDUCE_O:
        do = tl.load(DOUT + vrow, mask=mp[None, :], other=0.0).to(tl.float32)
        dphio = do * tl.load(MO + (h * R + ri[:, None]) * P + p[None, :], mask=mp[None, :], other=0.0)
    else:
        drow = (((b * S + tpos[:, None]) * R + ri[:, None]) * H + h) * P + p[None, :]
        dphio = tl.load(DOUT + drow, mask=mp[None, :], other=0.0).to(tl.float32)
    return v, psi, v * psi, dphio


@triton.jit
def wt_from_segsum(SEGSUM, bhc, ti, C: tl.constexpr):
    """Wt[i,j] = exp(segsum[t_j, t_i]) for t_i < t_j (keys by queries), else 0."""
    strict = ti[:, None] < ti[None, :]
    seg = tl.load(SEGSUM + (bhc * C + ti[None, :]) * C + ti[:, None], mask=strict, other=0.0)
    return tl.where(strict, tl.exp(seg), 0.0)


@triton.jit
def load_qkd(QKDOT, bh, tpos, ti, ri, S, R: tl.constexpr):
    """Block-diagonal QKD[i,j] = qk_dot[t, r_out=r_j, r_in=r_i] where t_i == t_j, and that mask."""
    same = ti[:, None] == ti[None, :]
    qkd = tl.load(QKDOT + ((bh * S + tpos[:, None]) * R + ri[None, :]) * R + ri[:, None],
                  mask=same, other=0.0).to(tl.float32)
    return qkd, same


# ----------------------------------------------------------------------------- shared math
@triton.jit
def score_grads(lkq, dkq, qkd, C: tl.constexpr, R: tl.constexpr):
    """DSSDA [C,C] and DGAMMA [C] from k.q^T, PsiV.dPhiO^T and the qk_dot diagonal."""
    return block_to_time(lkq * dkq, C, R), vec_to_time(tl.sum(qkd * dkq, axis=1), C, R)


@triton.jit
def score_weights(dkq, wt, same, gamma):
    """PsiV.dPhiO^T weighted by the chunk's decay (-> dK, dQ) and its gamma-scaled same-step
    diagonal (-> the qk_dot terms of dQ, dK)."""
    return dkq * wt, tl.where(same, dkq, 0.0) * gamma[:, None]


@triton.jit
def local_dpsiv(lkq, wt, qkd, gamma, psiv, dphio, dskip, HAS_D: tl.constexpr, PREC: tl.constexpr):
    """One chunk's local dPsiV [CR,P] (intra-chunk, qk_dot diagonal, D skip) and DD part [P]."""
    dpsiv = fdot(lkq * wt, dphio, PREC)
    dpsiv += fdot(qkd, dphio, PREC) * gamma[:, None]
    if HAS_D:
        dpsiv += dskip * dphio
        dd_part = tl.sum(dphio * psiv, axis=0)
    else:
        dd_part = tl.sum(dphio * 0.0, axis=0)
    return dpsiv, dd_part


@triton.jit
def chunk_local(ks, qr, qb, kb, psiv, dphio, wt, qkd, same, gamma, dskip,
                C: tl.constexpr, R: tl.constexpr, HAS_D: tl.constexpr, PREC: tl.constexpr):
    """Everything of one chunk that does not read dstates, on fused [C*R, *] tiles.

    Returns dssda [C,C] (keys by queries), dgamma [C], dpsiv_loc [CR,P] (intra + diagonal +
    D), dks_loc [CR,N] (w.r.t. ks), dqr_loc [CR,N] (w.r.t. qr), dq_diag / dk_diag [CR,N]
    (qk_dot term, w.r.t. qb / kb), dd_part [P].
    """
    lkq = fdot(ks, tl.trans(qr), PREC)  # [CR(k), CR(q)]
    dkq = fdot(psiv, tl.trans(dphio), PREC)  # [CR(k), CR(q)]
    dssda, dgam = score_grads(lkq, dkq, qkd, C, R)
    dkqw, gd = score_weights(dkq, wt, same, gamma)
    dpsiv, dd_part = local_dpsiv(lkq, wt, qkd, gamma, psiv, dphio, dskip, HAS_D, PREC)
    dks = fdot(dkqw, qr, PREC)
    dqr = fdot(tl.trans(dkqw), ks, PREC)
    dq_diag = fdot(tl.trans(gd), kb, PREC)
    dk_diag = fdot(gd, qb, PREC)
    return dssda, dgam, dpsiv, dks, dqr, dq_diag, dk_diag, dd_part


@triton.jit
def state_q_products(dphio, st, qr, ecs, PREC: tl.constexpr):
    """Inter-chunk q side (reads the cached state, not dstates) on a block of N columns: the
    elementwise terms of DDA_CS (to sum over N) [CR, cols] and dqr_inter [CR, cols]."""
    dq_raw = fdot(dphio, tl.trans(st), PREC)
    return qr * dq_raw, dq_raw * ecs[:, None]


@triton.jit
def state_q_terms(dphio, st, qr, ecs, C: tl.constexpr, R: tl.constexpr, PREC: tl.constexpr):
    """Inter-chunk q side (reads the cached state, not dstates): DDA_CS [C] and dqr_inter [CR,N]."""
    ddacs_terms, dq_inter = state_q_products(dphio, st, qr, ecs, PREC)
    return vec_to_time(tl.sum(ddacs_terms, axis=1), C, R), dq_inter


@triton.jit
def state_k_terms(ks, psiv, dstates, erev, PREC: tl.constexpr):
    """dstates-dependent k side: dpsiv_inter [CR,P], dk_raw [CR,N] (before exp(da_cs_rev))."""
    dpsiv = fdot(ks, dstates, PREC) * erev[:, None]
    dk_raw = fdot(psiv, tl.trans(dstates), PREC)
    return dpsiv, dk_raw


@triton.jit
def value_grads(dpsiv, psi, v, C: tl.constexpr, R: tl.constexpr, BP: tl.constexpr):
    """DV rows [C,P] and this chunk's DMIMO_V part [R,P] from dPsiV."""
    dv = rows_to_time(dpsiv * psi, C, R, BP)
    dmv = tl.sum(tl.reshape(dpsiv * v, (C, R, BP)), axis=0)
    return dv, dmv


@triton.jit
def finalize_qk(DQ, DK, DANG, dqr, dkr, qb, qbp, kb, kbp, cs, sn, dq_diag, dk_diag,
                b, h, c, i, n, partner, sgn, jn, rot, S, H, N, RD,
                C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr, BRD: tl.constexpr,
                PREC: tl.constexpr):
    """Inverse rotary of dqr/dkr, the qk_dot diagonal correction, DANGLES; stores DQ, DK, DANGLES."""
    CR: tl.constexpr = C * R
    tc = tl.arange(0, C)
    jj = tl.arange(0, BRD)
    g = angle_grad_cols(dqr, qb, qbp, sgn, cs, sn) + angle_grad_cols(dkr, kb, kbp, sgn, cs, sn)
    dang = rows_to_time(fold_angles(g, jn, rot, RD, BN, BRD, PREC), C, R, BRD)
    tl.store(DANG + ((b * S + c * C + tc[:, None]) * H + h) * RD + jj[None, :], dang,
             mask=(jj < RD)[None, :])
    dq = unrotate(dqr, partner, sgn, cs, sn, BN, PREC) + dq_diag
    dk = unrotate(dkr, partner, sgn, cs, sn, BN, PREC) + dk_diag
    mn = n < N
    orow = ((b * S * R + c * CR + i[:, None]) * H + h) * N + n[None, :]
    tl.store(DQ + orow, dq.to(DQ.dtype.element_ty), mask=mn[None, :])
    tl.store(DK + orow, dk.to(DK.dtype.element_ty), mask=mn[None, :])


@triton.jit
def dstates_step(dstates, decay, qr, dphio, ecs, PREC: tl.constexpr):
    """The reverse recurrence: from the dstates chunk c sees to the one chunk c-1 sees."""
    return dstates * decay + fdot(tl.trans(qr), dphio * ecs[:, None], PREC)


@triton.jit
def scan_step_operands(TS_S, EREV_S, ECS_S, KR_S, QR_S, PSIV_S, DPHIO_S, DECAY_S, STATES,
                       bh, bhc, tpos, i, cols, p, S, N, P, CR: tl.constexpr):
    """What one reverse-scan step over chunk ``bhc`` reads, for the N columns ``cols``:
    ts, exp(da_cs_rev), exp(da_cs) [CR]; kr, ks = kr * ts, qr [CR, cols]; PsiV, dPhiO [CR, P];
    the chunk decay; the cached state tile [cols, P]."""
    ts = load_time(TS_S, bh, tpos, S)
    kr = load_rows(KR_S, bhc, i, cols, N, CR)
    return (ts, load_time(EREV_S, bh, tpos, S), load_time(ECS_S, bh, tpos, S),
            kr, kr * ts[:, None], load_rows(QR_S, bhc, i, cols, N, CR),
            load_rows(PSIV_S, bhc, i, p, P, CR), load_rows(DPHIO_S, bhc, i, p, P, CR),
            tl.load(DECAY_S + bhc), load_state_tile(STATES, bhc, cols, p, N, P))


@triton.jit
def load_state_tile(X, bhc, cols, p, N, P):
    """Rows ``cols`` x columns ``p`` of chunk ``bhc``'s [N,P] state in a [B,H,nc,N,P] buffer, fp32."""
    return tl.load(X + (bhc * N + cols[:, None]) * P + p[None, :],
                   mask=(cols < N)[:, None] & (p < P)[None, :], other=0.0).to(tl.float32)


@triton.jit
def store_state_tile_t(X, val, bhc, cols, p, N, P):
    """A [len(p), len(cols)] tile, transposed, into rows ``cols`` x columns ``p`` of chunk
    ``bhc``'s [N,P] state in a [B,H,nc,N,P] buffer (the dstates increments and pass tiles held
    with P rows)."""
    tl.store(X + (bhc * N + cols[None, :]) * P + p[:, None], val, mask=(p < P)[:, None] & (cols < N)[None, :])


@triton.jit
def store_value_sums(DMV, DD, dmv, dd, bh, p, P, R: tl.constexpr, HAS_D: tl.constexpr):
    """DMIMO_V [R,P] and (HAS_D) DD of one (b, h)."""
    r_ = tl.arange(0, R)
    tl.store(DMV + (bh * R + r_[:, None]) * P + p[None, :], dmv, mask=(p < P)[None, :])
    if HAS_D:
        tl.store(DD + bh, dd)


@triton.jit
def load_rows(X, bhc, i, cols, ncols, CR: tl.constexpr):
    """A fused-row scratch tile [CR, len(cols)] of a [B,H,nc,CR,ncols] fp32 buffer."""
    return tl.load(X + (bhc * CR + i[:, None]) * ncols + cols[None, :],
                   mask=(cols < ncols)[None, :], other=0.0)


@triton.jit
def store_rows(X, val, bhc, i, cols, ncols, CR: tl.constexpr):
    tl.store(X + (bhc * CR + i[:, None]) * ncols + cols[None, :], val, mask=(cols < ncols)[None, :])


@triton.jit
def angle_index(b, h, tt, j, S, H, RD):
    """Offsets and mask of steps ``tt`` and angles ``j`` (index tensors that broadcast) in a
    [B, S, H, RD] tensor laid out as the angles: where j < RD."""
    return ((b * S + tt) * H + h) * RD + j, (j < RD) & (tt < S)


@triton.jit
def store_dangles(DANG, g, b, h, tt, j, S, H, RD, ADD: tl.constexpr):
    """DANGLES [B, S, H, RD] at steps ``tt`` and angles ``j`` (:func:`angle_index`); ADD: added
    to what is there (the post kernels' K_DONE: state_terms stored the k half)."""
    off, m = angle_index(b, h, tt, j, S, H, RD)
    ptr = DANG + off
    if ADD:
        g += tl.load(ptr, mask=m, other=0.0)
    tl.store(ptr, g, mask=m)


@triton.jit
def store_angle_cs(COS_S, SIN_S, cs, sn, b, h, tt, j, S, H, RD):
    """cos / sin tiles of the angles (steps ``tt`` [C, 1, 1], angle columns ``j`` [1, 1, J]) to
    [B, S, H, RD] buffers laid out as the angles, where j < RD (the pre kernels' ROT_CS: the Gluon
    aux and state_terms rotate q / k themselves from them, gluon_common.rotated_rows)."""
    off, m = angle_index(b, h, tt, j, S, H, RD)
    tl.store(COS_S + off, cs, mask=m)
    tl.store(SIN_S + off, sn, mask=m)


@triton.jit
def load_angles_cs(ANG, b, h, tpos, n, jn, rot, S, H, N, RD):
    mn = n < N
    a = tl.load(ANG + ((b * S + tpos[:, None]) * H + h) * RD + jn[None, :], mask=(rot & mn)[None, :], other=0.0)
    return tl.cos(a), tl.sin(a)


@triton.jit
def fused_chunk_body(DSSDA, DGAM, DV, DDACSREV, DFAC, DDA, DDACS, DQ, DK, DANG,
                     qb, qbp, qr, kb, kbp, kr, cs, sn, gamma, ts, ecs, erev, v, psi, psiv, dphio, wt,
                     qkd, same, st, decay, dstates, dskip, b, h, c, bh, bhc, i, n, partner, sgn, jn,
                     rot, p, S, H, N, P, RD, C: tl.constexpr, R: tl.constexpr, BN: tl.constexpr,
                     BP: tl.constexpr, BRD: tl.constexpr, HAS_D: tl.constexpr, PREC: tl.constexpr):
    """One chunk of the fused reverse scan, given its loaded tiles: writes every output row of
    the chunk and returns (dstates for the previous chunk, DMIMO_V part, DD part)."""
    mp = p < P
    tc = tl.arange(0, C)
    ks = kr * ts[:, None]
    # --- chunk-local terms, then the dstates-dependent ones
    dssda, dgam, dpsiv, dks, dqr, dq_diag, dk_diag, dd_part = chunk_local(
        ks, qr, qb, kb, psiv, dphio, wt, qkd, same, gamma, dskip, C, R, HAS_D, PREC)
    tl.store(DSSDA + (bhc * C + tc[:, None]) * C + tc[None, :], dssda)
    tl.store(DGAM + bh * S + c * C + tc, dgam)
    dpsiv_inter, dk_raw = state_k_terms(ks, psiv, dstates, erev, PREC)
    dpsiv += dpsiv_inter
    dv, dmv_c = value_grads(dpsiv, psi, v, C, R, BP)
    tl.store(DV + ((b * S + c * C + tc[:, None]) * H + h) * P + p[None, :],
             dv.to(DV.dtype.element_ty), mask=mp[None, :])
    tl.store(DDACSREV + bh * S + c * C + tc, vec_to_time(tl.sum(ks * dk_raw, axis=1), C, R))
    dks += dk_raw * erev[:, None]
    tl.store(DFAC + bh * S + c * C + tc, vec_to_time(tl.sum(kr * dks, axis=1), C, R))
    dda = decay * tl.sum(tl.sum(st * dstates, axis=1), axis=0)
    tl.store(DDA + bh * S + c * C + tc, tl.zeros([C], dtype=tl.float32) + dda)
    ddacs, dq_inter = state_q_terms(dphio, st, qr, ecs, C, R, PREC)
    tl.store(DDACS + bh * S + c * C + tc, ddacs)
    finalize_qk(DQ, DK, DANG, dqr + dq_inter, dks * ts[:, None], qb, qbp, kb, kbp, cs, sn,
                dq_diag, dk_diag, b, h, c, i, n, partner, sgn, jn, rot, S, H, N, RD, C, R, BN, BRD, PREC)
    # dstates becomes the gradient w.r.t. the state entering chunk c
    dstates = dstates_step(dstates, decay, qr, dphio, ecs, PREC)
    return dstates, dmv_c, dd_part


def alloc_scratch(meta, device, names) -> dict:
    """fp32 scratch buffers by name (torch.empty: every stage writes before it reads).

    rows_N [B,H,nc,C*R,N], rows_P [B,H,nc,C*R,P], time [B,H,S], chunk [B,H,nc], cc [B,H,nc,C,C],
    DST [B,H,nc,N,P] (dstates per chunk), DMVP [B,H,nc,R,P] (DMIMO_V per chunk), GDB
    [B,H,nc,C*R,R] (same-step blocks of the diagonal terms' weights), COS / SIN [B,S,H,RD] (cos /
    sin of the angles, laid out as they are).

    One allocation, one strided view per buffer (a torch.empty per buffer cost the host ~5 us
    each, and the host bounds the smaller shapes); the views' offsets, shapes and strides are
    worked out once per (sizes, names) (:func:`_scratch_layout`)."""
    total, layout = _scratch_layout(meta.B, meta.H, meta.S, meta.N, meta.P, meta.R, meta.C, meta.RD, tuple(names))
    flat = torch.empty(total, dtype=torch.float32, device=device)
    return {n: flat.as_strided(shape, stride, offset) for n, offset, shape, stride in layout}


@functools.lru_cache(maxsize=256)
def _scratch_layout(B: int, H: int, S: int, N: int, P: int, R: int, C: int, RD: int, names: tuple) -> tuple:
    """(elements in all, ((name, offset, shape, contiguous strides), ...)) of :func:`alloc_scratch`'s
    views; each starts on a SCRATCH_ALIGN-element boundary (TMA needs 16-byte aligned bases)."""
    nc = S // C
    shapes = {
        "QB": (B, H, nc, C * R, N), "KB": (B, H, nc, C * R, N), "QR": (B, H, nc, C * R, N),
        "KR": (B, H, nc, C * R, N), "PSIV": (B, H, nc, C * R, P), "DPHIO": (B, H, nc, C * R, P),
        "GAM": (B, H, S), "TS": (B, H, S), "ECS": (B, H, S), "EREV": (B, H, S),
        "WT": (B, H, nc, C, C), "DECAY": (B, H, nc),
        "DPSIV": (B, H, nc, C * R, P), "DKS": (B, H, nc, C * R, N), "DQR": (B, H, nc, C * R, N),
        "DQD": (B, H, nc, C * R, N), "DKD": (B, H, nc, C * R, N), "DDP": (B, H, nc),
        "DKR": (B, H, nc, C * R, N), "DST": (B, H, nc, N, P), "DMVP": (B, H, nc, R, P),
        "GDB": (B, H, nc, C * R, R), "COS": (B, S, H, RD), "SIN": (B, S, H, RD),
    }
    layout, total = [], 0
    for n in names:
        shape = shapes[n]
        stride = tuple(math.prod(shape[k + 1:]) for k in range(len(shape)))
        layout.append((n, total, shape, stride))
        total += -(-math.prod(shape) // SCRATCH_ALIGN) * SCRATCH_ALIGN
    return total, tuple(layout)


SCRATCH_ALIGN = 64  # fp32 elements: 256 bytes


PRE_SCRATCH = ("QB", "KB", "QR", "KR", "PSIV", "DPHIO", "GAM", "TS", "ECS", "EREV", "WT", "DECAY")
AUX_SCRATCH = ("DPSIV", "DKS", "DQR", "DQD", "DKD", "DDP")


@triton.jit
def fused_rows(C: tl.constexpr, R: tl.constexpr):
    """(i, t, r) of one chunk's C*R fused rows, i = t*R + r."""
    i = tl.arange(0, C * R)
    return i, i // R, i % R


@triton.jit
def chunk_coords(H, nc, HEADS_INNER: tl.constexpr = False):
    """(b, h, c, bh, bhc) of a program on a (B*H*nc) grid: program ids in (b, h, c) order, or with
    HEADS_INNER in (b, c, h) order, a chunk's programs for every head adjacent (where G < H they
    read the same q / k rows, which L2 then serves once)."""
    pid = tl.program_id(0).to(tl.int64)
    if HEADS_INNER:
        h = pid % H
        b = pid // H // nc
        c = pid // H % nc
        bh = b * H + h
        bhc = bh * nc + c
    else:
        bhc = pid
        bh = bhc // nc
        b = bh // H
        h = bh % H
        c = bhc % nc
    return b, h, c, bh, bhc


def sub_chunk(meta, steps: int | None):
    """``meta`` with C = ``steps``, a power-of-two divisor of its chunk size: what a per-chunk
    kernel that reads and writes per-step rows only is launched with to run on sub-chunks (one
    program per ``steps`` steps; a chunk's rows are contiguous in every per-row scratch buffer).
    ``meta`` itself where ``steps`` is None or the whole chunk."""
    if steps is None or steps == meta.C:
        return meta
    if steps < 1 or meta.C % steps or steps & (steps - 1):
        raise ValueError(f"steps per program: {steps} is not a power-of-two divisor of C = {meta.C}")
    return dataclasses.replace(meta, C=steps)


@triton.jit
def chunk_frame(S, H, C: tl.constexpr, R: tl.constexpr, HEADS_INNER: tl.constexpr = False):
    """A (B*H*nc)-grid program's (b, h, c, bh, bhc) and its chunk's fused rows (i, t, r), the
    rows' time positions and the chunk's C steps: (b, h, c, bh, bhc, i, ti, ri, tpos, tc)."""
    b, h, c, bh, bhc = chunk_coords(H, S // C, HEADS_INNER)
    i, ti, ri = fused_rows(C, R)
    return b, h, c, bh, bhc, i, ti, ri, c * C + ti, tl.arange(0, C)


@triton.jit
def load_time(X, bh, tpos, S):
    return tl.load(X + bh * S + tpos)


@triton.jit
def wt_rows(WT, bhc, ti, C: tl.constexpr):
    """[C*R, C*R] decay matrix from the pre kernel's [C(k), C(q)] one."""
    return tl.load(WT + (bhc * C + ti[:, None]) * C + ti[None, :])


@triton.jit
def load_biased(X, BIAS, b, h, hq, tt, rr, cc, S, G, N, R: tl.constexpr):
    """q or k ([B,S,R,G,N]) plus its bias ([H,R,N]) at steps ``tt``, ranks ``rr`` and columns
    ``cc``, index tensors that broadcast to the tile's shape; fp32, 0 where cc >= N."""
    m = cc < N
    row = ((b * S + tt) * R + rr) * G + hq
    x = tl.load(X + row * N + cc, mask=m, other=0.0).to(tl.float32)
    return x + tl.load(BIAS + (h * R + rr) * N + cc, mask=m, other=0.0)


@triton.jit
def load_biased_rows(X, BIAS, b, h, hq, tpos, ri, cols, S, G, N, R: tl.constexpr):
    """q or k plus its bias on one chunk's fused rows (tpos, ri) and columns ``cols``, fp32: the
    pre-rotation operand the pre kernel otherwise stores as QB / KB (same arithmetic)."""
    return load_biased(X, BIAS, b, h, hq, tpos[:, None], ri[:, None], cols[None, :], S, G, N, R)


@triton.jit
def angle_grad_pair(d1, d2, x1, x2, cj, sj):
    """d(loss)/d(angle j) through the rotation of the column pair (j, j + N/2): pre-rotation
    values x1, x2, their rotated-domain gradients d1, d2, cos / sin of the angle."""
    return d1 * (-sj * x1 - cj * x2) + d2 * (-sj * x2 + cj * x1)


@triton.jit
def chunk_psiv_dphio(PSIV_S, DPHIO_S, DOUT, V, MV, MO, b, h, bhc, i, tpos, ri, p, S, H, P,
                     R: tl.constexpr, CR: tl.constexpr, REDUCE_O: tl.constexpr, INPUTS: tl.constexpr):
    """A chunk's PsiV and dPhiO rows [C*R, len(p)]: from the 16-bit inputs (INPUTS, stage10) or
    from the pre kernel's scratch. A caller that uses one of the two never loads the other."""
    if INPUTS:
        _v, _psi, psiv, dphio = load_psiv_dphio(DOUT, V, MV, MO, b, h, tpos, ri, p, S, H, P, R, REDUCE_O)
    else:
        psiv = load_rows(PSIV_S, bhc, i, p, P, CR)
        dphio = load_rows(DPHIO_S, bhc, i, p, P, CR)
    return psiv, dphio
