"""Shared Triton helpers of the bwd_bwd stages: index sets, rotary, rank folding.

Conventions (all stages): one chunk's rows are fused as i = t*R + r (t the step inside the
chunk, r the MIMO rank), as upstream does; all tensors are contiguous and indexed from their
sizes; S is the padded length (S % C == 0); arithmetic and dots are fp32 with
``input_precision=PREC`` ("ieee" by default, so results meet the fp32 golden criterion).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

DEFAULT_PREC = "ieee"


def pow2(x: int, lo: int = 16) -> int:
    """Block size for a dim: next power of two, at least ``lo`` (tl.dot needs >= 16)."""
    return max(lo, triton.next_power_of_2(int(x)))


def blocks(meta) -> dict:
    """The constexpr block sizes every stage uses."""
    return dict(BN=pow2(meta.N), BP=pow2(meta.P), BRD=pow2(meta.RD))


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
def swap_halves(x, partner, BN: tl.constexpr):
    """x[:, partner(n)] for every column n, as an exact 0/1 permutation dot."""
    m = tl.arange(0, BN)
    perm = (m[:, None] == partner[None, :]).to(tl.float32)
    return tl.dot(x, perm, input_precision="ieee")


@triton.jit
def unrotate(dxr, partner, sgn, cs, sn, BN: tl.constexpr):
    """Gradient w.r.t. the pre-rotation input from the gradient w.r.t. the rotated one."""
    return cs * dxr - sgn[None, :] * sn * swap_halves(dxr, partner, BN)


@triton.jit
def angle_grad_cols(dxr, x, xp, sgn, cs, sn):
    """Per column contribution to d(angle): dxr * d(xr)/d(angle)."""
    return dxr * (-sn * x + sgn[None, :] * cs * xp)


@triton.jit
def fold_angles(g, jn, rot, RD, BN: tl.constexpr, BRD: tl.constexpr):
    """[rows, BN] per-column angle gradients -> [rows, BRD] per angle (sum of each pair)."""
    jj = tl.arange(0, BRD)
    fold = ((jn[:, None] == jj[None, :]) & rot[:, None] & (jj[None, :] < RD)).to(tl.float32)
    return tl.dot(g, fold, input_precision="ieee")


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
    """Per-row discretization: gamma, trap_scale, exp(da_cs), exp(da_cs_rev)."""
    dt = tl.load(DT + bh * S + tpos)
    tr = tl.load(TRAP + bh * S + tpos)
    nxt = tpos + 1
    dt1 = tl.load(DT + bh * S + nxt, mask=nxt < S, other=0.0)
    tr1 = tl.load(TRAP + bh * S + nxt, mask=nxt < S, other=0.0)
    gamma = dt * tl.sigmoid(tr)
    ts = gamma + dt1 * tl.sigmoid(-tr1)
    ecs = tl.exp(tl.load(DACS + bh * S + tpos))
    erev = tl.exp(tl.load(DACSREV + bh * S + tpos))
    return gamma, ts, ecs, erev


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
def load_decay_blocks(SEGSUM, QKDOT, bhc, bh, tpos, ti, ri, S, C: tl.constexpr, R: tl.constexpr):
    """Wt[i,j] = exp(segsum[t_j, t_i]) for t_i < t_j (keys by queries), and the block-diagonal
    QKD[i,j] = qk_dot[t, r_out=r_j, r_in=r_i] for t_i == t_j."""
    strict = ti[:, None] < ti[None, :]
    seg = tl.load(SEGSUM + (bhc * C + ti[None, :]) * C + ti[:, None], mask=strict, other=0.0)
    wt = tl.where(strict, tl.exp(seg), 0.0)
    same = ti[:, None] == ti[None, :]
    qkd = tl.load(QKDOT + ((bh * S + tpos[:, None]) * R + ri[None, :]) * R + ri[:, None],
                  mask=same, other=0.0).to(tl.float32)
    return wt, qkd, same
