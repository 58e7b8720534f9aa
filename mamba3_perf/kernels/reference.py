"""PyTorch oracles for the Mamba-3 MIMO bwd_bwd (no Triton here).

Three functions, all on plain torch ops:

* :func:`forward_cache` recomputes what the first backward pass caches: ``states`` (the
  state entering each chunk) and ``qk_dot`` (same-position rank q.k products).
* :func:`bwd_bwd_ref` computes the 12 gradients with explicit formulas in fp32 from the
  same 19 inputs the kernels take (the cached ``states`` / ``qk_dot`` included).
* :func:`bwd_bwd_golden` writes the block's forward output as a differentiable fp64
  function whose leaves are exactly the quantities the 12 gradients are taken with respect
  to, and lets autograd produce them. It shares no gradient formula with the others.

Semantics follow upstream ``mamba_mimo_bwd_bwd`` (state-spaces/mamba,
mamba_ssm/ops/tilelang/mamba3/mamba3_mimo_bwd.py, without the Z gate). Per (b, h), with
hq = h // (H/G), rows of a chunk fused as i = t*R + r:

  qb = q[.., hq] + q_bias[h]          kb likewise           (pre-rotation, "DQ/DK" leaves)
  qr = rot(qb, angles)                rotate-half on dims [0,RD) paired with [N/2, N/2+RD)
  gamma = dt*sigmoid(trap);  sgamma[t] = dt[t+1]*sigmoid(-trap[t+1]) (0 at S-1)
  trap_scale = gamma + sgamma;  ks = rot(kb) * trap_scale
  PsiV[t,r] = v[t]*mimo_v[r];  dPhiO[t,r] = dout[t]*mimo_o[r] (reduce-O) or dout[t,r]
  y[t,r] = exp(da_cs[t]) qr[t,r].state_c                        (inter-chunk)
         + sum_{t'<t in chunk, r'} (qr[t,r].ks[t',r']) exp(segsum[t,t']) PsiV[t',r']
         + gamma[t] sum_{r'} (qb[t,r].kb[t,r']) PsiV[t,r']      (diagonal, qk_dot)
         + D PsiV[t,r]
  state_{c+1} = exp(da_cs[chunk end]) state_c + sum_t exp(da_cs_rev[t]) ks[t]^T PsiV[t]

Gradient conventions (as upstream emits them; the exp-chain to dA/dt is a later step):
DQ, DK w.r.t. qb, kb; DFACTOR w.r.t. trap_scale; DGAMMA w.r.t. the diagonal's gamma;
DDA w.r.t. da_cs at the chunk end through the state decay (broadcast over the chunk);
DDA_CS w.r.t. exp(da_cs) in the inter-chunk term; DDA_CS_REV w.r.t. exp(da_cs_rev);
DSSDA[c, t', t] w.r.t. the intra-chunk decay matrix entry (t, t'), unmasked (transposed
layout, keys by queries); DMIMO_V per batch; DD per batch.
"""
from __future__ import annotations

import math

import torch

from mamba3_perf.kernels import tail

GRADIENTS = ("DQ", "DK", "DV", "DMIMO_V", "DANGLES", "DFACTOR", "DGAMMA", "DDA", "DSSDA",
             "DDA_CS_REV", "DDA_CS", "DD")

# The matrix products of :func:`bwd_bwd_ref`, by the names its ``products`` hook receives: the
# nine of analysis.limits.MATMULS (same names), then the three qk_dot terms, block-diagonal in
# the fused rows (R x R blocks: elementwise work in a kernel, full [CR, CR] products here).
PRODUCTS = ("k . q^T", "(lkq) . dPhiO", "ks . dstates", "PsiV . dPhiO^T", "PsiV . dstates^T",
            "dkq . q", "dPhiO . states^T", "dkq^T . k", "q^T . dPhiO",
            "qk_dot . dPhiO", "gd^T . kb", "gd . qb")


# ----------------------------------------------------------------------------- helpers
def _per_head(x: torch.Tensor, H: int) -> torch.Tensor:
    """[B,S,R,G,N] -> [B,H,S,R,N] (GQA: head h reads qk head h // (H/G))."""
    G = x.shape[3]
    idx = torch.arange(H, device=x.device) // (H // G)
    return x[:, :, :, idx, :].permute(0, 3, 1, 2, 4)


def _rotate(x: torch.Tensor, ang: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate-half rotary: x [B,H,S,R,N], ang [B,H,S,RD]; pairs dim n with n + N/2, n < RD."""
    N, RD = x.shape[-1], ang.shape[-1]
    h = N // 2
    c, s = torch.cos(ang)[..., None, :], torch.sin(ang)[..., None, :]
    if inverse:
        s = -s
    x1, x2 = x[..., :RD], x[..., h:h + RD]
    return torch.cat([c * x1 - s * x2, x[..., RD:h], s * x1 + c * x2, x[..., h + RD:]], dim=-1)


def _gammas(dt: torch.Tensor, trap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """gamma and trap_scale = gamma + shifted gamma, [B,H,S]."""
    gamma = dt * torch.sigmoid(trap)
    sg = dt * torch.sigmoid(-trap)
    sg = torch.cat([sg[..., 1:], torch.zeros_like(sg[..., :1])], dim=-1)
    return gamma, gamma + sg


def _dphio(dout: torch.Tensor, mimo_o: torch.Tensor | None, R: int) -> torch.Tensor:
    """dPhiO [B,H,S,R,P] from reduce-O dout [B,S,H,P] (with mimo_o) or per-rank [B,S,R,H,P]."""
    if mimo_o is not None:
        return dout.permute(0, 2, 1, 3)[:, :, :, None, :] * mimo_o[None, :, None, :, :]
    return dout.permute(0, 3, 1, 2, 4)


def _chunks(x: torch.Tensor, C: int) -> torch.Tensor:
    """[B,H,S,R,X] -> [B,H,nc,C*R,X] with fused row t*R + r (S % C == 0)."""
    B, H, S, R, X = x.shape
    return x.reshape(B, H, S // C, C * R, X)


def _unchunk_rows(x: torch.Tensor, R: int) -> torch.Tensor:
    """[B,H,nc,C*R,X] -> [B,H,S,R,X]."""
    B, H, nc, CR, X = x.shape
    return x.reshape(B, H, nc * (CR // R), R, X)


def _to_time(x: torch.Tensor, R: int) -> torch.Tensor:
    """Per-row values [...,nc,C*R] summed over ranks -> [..., nc*C]."""
    *lead, nc, CR = x.shape
    return x.reshape(*lead, nc, CR // R, R).sum(-1).reshape(*lead, nc * (CR // R))


def _rows(x: torch.Tensor, R: int, C: int) -> torch.Tensor:
    """Per-time [B,H,S] -> per-row [B,H,nc,C*R]."""
    B, H, S = x.shape
    return x.reshape(B, H, S // C, C).repeat_interleave(R, dim=-1)


def _qk_grid_to_dq(x: torch.Tensor) -> torch.Tensor:
    """[B,H,S,R,N] -> kernel layout [B,S*R,H,N]."""
    B, H, S, R, N = x.shape
    return x.permute(0, 2, 3, 1, 4).reshape(B, S * R, H, N)


# ----------------------------------------------------------------------------- forward cache
def forward_cache(q, k, v, q_bias, k_bias, mimo_v, da_cs, da_cs_rev, dt, trap, angles,
                  chunk_size: int = 16, states_dtype: torch.dtype = torch.float32):
    """Recompute the first pass's cache: (states [B,H,nc,N,P], qk_dot [B,H,S,R,R] in q.dtype).

    Handles a partial last chunk natively (its decay ends at da_cs[S-1]).
    """
    f = torch.float32
    B, S, R, G, N = q.shape
    H, P = v.shape[2], v.shape[3]
    C = chunk_size
    qb = _per_head(q.to(f), H) + q_bias.to(f)[None, :, None]
    kb = _per_head(k.to(f), H) + k_bias.to(f)[None, :, None]
    ang = angles.to(f).permute(0, 2, 1, 3)
    _, ts = _gammas(dt.to(f), trap.to(f))
    ks = _rotate(kb, ang) * ts[..., None, None]
    psiv = v.to(f).permute(0, 2, 1, 3)[:, :, :, None, :] * mimo_v.to(f)[None, :, None]
    qk_dot = torch.einsum("bhsrn,bhsun->bhsru", qb, kb).to(q.dtype)
    e_rev = torch.exp(da_cs_rev.to(f))
    nc = math.ceil(S / C)
    states = torch.empty(B, H, nc, N, P, dtype=states_dtype, device=q.device)
    state = torch.zeros(B, H, N, P, dtype=f, device=q.device)
    for c in range(nc):
        s0, s1 = c * C, min(S, (c + 1) * C)
        states[:, :, c] = state.to(states_dtype)
        kc = (ks[:, :, s0:s1] * e_rev[:, :, s0:s1, None, None]).reshape(B, H, -1, N)
        vc = psiv[:, :, s0:s1].reshape(B, H, -1, P)
        state = state * torch.exp(da_cs[:, :, s1 - 1].to(f))[..., None, None] + kc.transpose(-1, -2) @ vc
    return states, qk_dot


# ----------------------------------------------------------------------------- fp32 reference
def _fp32_product(name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def bwd_bwd_ref(dout, q, k, v, q_bias, k_bias, mimo_v, states, qk_dot, da_cs, da_cs_rev, dt, trap,
                segsum, angles, mimo_o=None, d=None, chunk_size: int = 16,
                rotary_dim_divisor: int = 4, output_dtype=None, products=None, fold_diag: bool = False) -> dict:
    """The 12 gradients by explicit formulas in fp32 (pads a tail chunk like the kernels).

    ``products``: ``f(name, a, b) -> a @ b`` for every matrix product, named as in
    :data:`PRODUCTS` (default: fp32 matmul). analysis.precision passes one that rounds the
    operands to a tensor-core input format, to see which products need more than one pass.
    ``fold_diag``: the qk_dot diagonal terms as stage45_diagfold forms them, folded into the
    weighted scores of "dkq . q" and "dkq^T . k" (gamma / ts on the same-step pairs; the products
    "gd^T . kb" and "gd . qb" not formed), DFACTOR less the fold's part from the same-step pairs of
    lkq dkq: the same gradients, each product's rounding where that formulation puts it.
    """
    mm = products or _fp32_product
    f = torch.float32
    B, S, R, G, N = q.shape
    H, P = v.shape[2], v.shape[3]
    C = chunk_size
    raw = dict(dout=dout, q=q, k=k, v=v, angles=angles, qk_dot=qk_dot, dt=dt, trap=trap,
               da_cs=da_cs, da_cs_rev=da_cs_rev, segsum=segsum)
    p = tail.pad_inputs(raw, S, C)
    Sp = tail.padded_len(S, C)
    nc = Sp // C
    CR = C * R

    qb = _per_head(p["q"].to(f), H) + q_bias.to(f)[None, :, None]
    kb = _per_head(p["k"].to(f), H) + k_bias.to(f)[None, :, None]
    ang = p["angles"].to(f).permute(0, 2, 1, 3)
    gamma, ts = _gammas(p["dt"].to(f), p["trap"].to(f))
    qr, kr = _rotate(qb, ang), _rotate(kb, ang)
    ks = kr * ts[..., None, None]
    vh = p["v"].to(f).permute(0, 2, 1, 3)  # [B,H,S,P]
    psiv = vh[:, :, :, None, :] * mimo_v.to(f)[None, :, None]
    dphio = _dphio(p["dout"].to(f), None if mimo_o is None else mimo_o.to(f), R)

    qbC, kbC, qrC, krC, ksC = (_chunks(x, C) for x in (qb, kb, qr, kr, ks))
    psivC, dphioC = _chunks(psiv, C), _chunks(dphio, C)
    gam_r, ts_r = _rows(gamma, R, C), _rows(ts, R, C)
    ecs_r, erev_r = _rows(torch.exp(p["da_cs"].to(f)), R, C), _rows(torch.exp(p["da_cs_rev"].to(f)), R, C)
    da_end = p["da_cs"].to(f).reshape(B, H, nc, C)[..., -1]  # [B,H,nc]

    ti = torch.arange(CR, device=q.device) // R
    strict = (ti[:, None] < ti[None, :]).to(f)  # [i(k row), j(q col)] t_i < t_j
    block = (ti[:, None] == ti[None, :]).to(f)
    seg = p["segsum"].to(f)  # [B,H,nc,tq,tk]
    wt = torch.exp(seg).transpose(-1, -2).repeat_interleave(R, -1).repeat_interleave(R, -2) * strict
    qkc = p["qk_dot"].to(f).reshape(B, H, nc, C, R, R)  # [.., t, r_out, r_in]
    eye = torch.eye(C, device=q.device, dtype=f)
    qkd = torch.einsum("zhctab,tu->zhctbua", qkc, eye).reshape(B, H, nc, CR, CR)  # [i=(t,r_in), j=(u,r_out)]

    # chunk-local products
    lkq = mm("k . q^T", ksC, qrC.transpose(-1, -2))  # [.., i(k), j(q)]
    dkq = mm("PsiV . dPhiO^T", psivC, dphioC.transpose(-1, -2))  # [.., i(k), j(q)]
    dssda = (lkq * dkq).reshape(B, H, nc, C, R, C, R).sum((-3, -1))
    dpsiv = mm("(lkq) . dPhiO", lkq * wt, dphioC) + gam_r[..., None] * mm("qk_dot . dPhiO", qkd, dphioC)
    if d is not None:
        dpsiv = dpsiv + d.to(f)[None, :, None, None, None] * dphioC
    dgamma = _to_time((qkd * dkq).sum(-1), R)
    gd = dkq * block * gam_r[..., None]
    if fold_diag:  # stage45_diagfold: gd kb = rot^-1(gd kr) within a step, carried by the scores
        inv_ts = torch.where(ts_r != 0, 1 / torch.where(ts_r != 0, ts_r, 1.0), 0.0)
        scores = dkq * wt + gd * inv_ts[..., None]
        fold_fac = _to_time((lkq * gd).sum(-1) * inv_ts * inv_ts, R)  # its part of DFACTOR
    else:
        scores = dkq * wt
        dq_diag = mm("gd^T . kb", gd.transpose(-1, -2), kbC)
        dk_diag = mm("gd . qb", gd, qbC)
    dk_s = mm("dkq . q", scores, qrC)
    dq_r = mm("dkq^T . k", scores.transpose(-1, -2), ksC)

    # reverse scan over chunks: dstates is the gradient w.r.t. the state leaving chunk c
    st = states.to(f)
    dstates = torch.zeros(B, H, N, P, dtype=f, device=q.device)
    dda = torch.empty(B, H, nc, dtype=f, device=q.device)
    dk_raw = torch.empty_like(ksC)
    dpsiv_inter = torch.empty_like(psivC)
    for c in reversed(range(nc)):
        dpsiv_inter[:, :, c] = mm("ks . dstates", ksC[:, :, c], dstates)
        dk_raw[:, :, c] = mm("PsiV . dstates^T", psivC[:, :, c], dstates.transpose(-1, -2))
        decay = torch.exp(da_end[:, :, c])
        dda[:, :, c] = decay * (st[:, :, c] * dstates).sum((-1, -2))
        dstates = dstates * decay[..., None, None] + mm(
            "q^T . dPhiO", qrC[:, :, c].transpose(-1, -2), dphioC[:, :, c] * ecs_r[:, :, c, :, None])
    dpsiv = dpsiv + dpsiv_inter * erev_r[..., None]
    dda_cs_rev = _to_time((ksC * dk_raw).sum(-1), R)
    dk_s = dk_s + dk_raw * erev_r[..., None]
    dq_raw = mm("dPhiO . states^T", dphioC, st.transpose(-1, -2))
    dda_cs = _to_time((qrC * dq_raw).sum(-1), R)
    dq_r = dq_r + dq_raw * ecs_r[..., None]
    dfactor = _to_time((krC * dk_s).sum(-1), R)
    if fold_diag:
        dfactor = dfactor - fold_fac
    dk_r = dk_s * ts_r[..., None]

    # value side
    psi_rows = mimo_v.to(f).repeat(1, C, 1)  # [H, C*R, P]: row t*R + r -> mimo_v[r]
    dv = (dpsiv * psi_rows[None, :, None]).reshape(B, H, nc, C, R, P).sum(-2).reshape(B, H, Sp, P).permute(0, 2, 1, 3)
    v_rows = vh.reshape(B, H, nc, C, 1, P)
    dmimo_v = (dpsiv.reshape(B, H, nc, C, R, P) * v_rows).sum((2, 3))
    dd = (dphioC * psivC).sum((2, 3, 4)) if d is not None else None

    # rotary back + angle gradient
    dqr, dkr = _unchunk_rows(dq_r, R), _unchunk_rows(dk_r, R)
    RD, h = ang.shape[-1], N // 2
    c_, s_ = torch.cos(ang)[..., None, :], torch.sin(ang)[..., None, :]

    def dangle(dx, x):
        x1, x2 = x[..., :RD], x[..., h:h + RD]
        return (dx[..., :RD] * (-s_ * x1 - c_ * x2) + dx[..., h:h + RD] * (c_ * x1 - s_ * x2)).sum(-2)

    dangles = (dangle(dqr, qb) + dangle(dkr, kb)).permute(0, 2, 1, 3)
    dq = _rotate(dqr, ang, inverse=True)
    dk = _rotate(dkr, ang, inverse=True)
    if not fold_diag:
        dq = dq + _unchunk_rows(dq_diag, R)
        dk = dk + _unchunk_rows(dk_diag, R)

    qdt = output_dtype or q.dtype
    vdt = output_dtype or v.dtype
    out = dict(
        DQ=_qk_grid_to_dq(dq).to(qdt), DK=_qk_grid_to_dq(dk).to(output_dtype or k.dtype),
        DV=dv.to(vdt), DMIMO_V=dmimo_v, DANGLES=dangles.contiguous(), DFACTOR=dfactor,
        DGAMMA=dgamma, DDA=dda.repeat_interleave(C, -1), DSSDA=dssda, DDA_CS_REV=dda_cs_rev,
        DDA_CS=dda_cs, DD=dd,
    )
    return tail.crop_outputs(out, S, C)


# ----------------------------------------------------------------------------- fp64 golden
def _forward_y(qb, kb, v, mv, ang, ts, gd, e_cs, e_rev, a_end, xw, dl, segsum, R: int, C: int):
    """The block's per-rank output y [B,H,S,R,P] from the golden's leaves (any float dtype).

    qb, kb [B,H,S,R,N]; v [B,S,H,P]; mv [B,H,R,P]; ang [B,S,H,RD]; ts, gd, e_cs, e_rev
    [B,H,S]; a_end [B,H,nc]; xw [B,H,nc,C,C] (added to the masked decay matrix); dl [B,H].
    """
    B, H, S, _, N = qb.shape
    P = v.shape[-1]
    nc = math.ceil(S / C)
    angh = ang.permute(0, 2, 1, 3)
    qr = _rotate(qb, angh)
    ks = _rotate(kb, angh) * ts[..., None, None]
    psiv = v.permute(0, 2, 1, 3)[:, :, :, None, :] * mv[:, :, None]  # [B,H,S,R,P]
    state = torch.zeros(B, H, N, P, dtype=qb.dtype, device=qb.device)
    ys = []
    for c in range(nc):
        s0, s1 = c * C, min(S, (c + 1) * C)
        L = s1 - s0
        qc = qr[:, :, s0:s1].reshape(B, H, L * R, N)
        kc = ks[:, :, s0:s1].reshape(B, H, L * R, N)
        pc = psiv[:, :, s0:s1].reshape(B, H, L * R, P)
        y = e_cs[:, :, s0:s1].repeat_interleave(R, -1)[..., None] * (qc @ state)
        tril = torch.tril(torch.ones(L, L, dtype=qb.dtype, device=qb.device), -1)
        w = torch.exp(segsum[:, :, c, :L, :L]) * tril + xw[:, :, c, :L, :L]  # [t_q, t_k]
        w = w.repeat_interleave(R, -1).repeat_interleave(R, -2)
        y = y + ((qc @ kc.transpose(-1, -2)) * w) @ pc
        qkdot = qb[:, :, s0:s1] @ kb[:, :, s0:s1].transpose(-1, -2)  # [B,H,L,R_out,R_in]
        ydiag = gd[:, :, s0:s1, None, None] * (qkdot @ psiv[:, :, s0:s1])
        y = y + ydiag.reshape(B, H, L * R, P) + dl[:, :, None, None] * pc
        ys.append(y.reshape(B, H, L, R, P))
        kst = kc * e_rev[:, :, s0:s1].repeat_interleave(R, -1)[..., None]
        state = state * torch.exp(a_end[:, :, c])[..., None, None] + kst.transpose(-1, -2) @ pc
    return torch.cat(ys, dim=2)


def _golden_leaves(q, k, v, q_bias, k_bias, mimo_v, da_cs, da_cs_rev, dt, trap, angles, d, C, f):
    """The quantities the 12 gradients are taken with respect to, from the raw inputs."""
    B, S, R, G, N = q.shape
    H = v.shape[2]
    nc = math.ceil(S / C)
    gamma, ts = _gammas(dt.to(f), trap.to(f))
    ends = torch.tensor([min(S, (c + 1) * C) - 1 for c in range(nc)], device=q.device)
    return dict(
        qb=_per_head(q.to(f), H) + q_bias.to(f)[None, :, None],
        kb=_per_head(k.to(f), H) + k_bias.to(f)[None, :, None],
        v=v.to(f), mv=mimo_v.to(f)[None].expand(B, -1, -1, -1), ang=angles.to(f), ts=ts, gd=gamma,
        e_cs=torch.exp(da_cs.to(f)), e_rev=torch.exp(da_cs_rev.to(f)), a_end=da_cs.to(f)[:, :, ends],
        xw=torch.zeros(B, H, nc, C, C, dtype=f, device=q.device),
        dl=torch.zeros(B, H, dtype=f, device=q.device) if d is None else d.to(f)[None].expand(B, -1),
    )


def forward_output(dout, q, k, v, q_bias, k_bias, mimo_v, states, qk_dot, da_cs, da_cs_rev, dt,
                   trap, segsum, angles, mimo_o=None, d=None, chunk_size: int = 16,
                   rotary_dim_divisor: int = 4, output_dtype=None) -> torch.Tensor:
    """The forward per-rank output y [B,H,S,R,P] in the dtype of q (promoted to fp32 at least)."""
    del dout, states, qk_dot, mimo_o, rotary_dim_divisor, output_dtype
    f = torch.promote_types(q.dtype, torch.float32)
    lv = _golden_leaves(q, k, v, q_bias, k_bias, mimo_v, da_cs, da_cs_rev, dt, trap, angles, d, chunk_size, f)
    return _forward_y(**lv, segsum=segsum.to(f), R=q.shape[2], C=chunk_size)


def bwd_bwd_golden(dout, q, k, v, q_bias, k_bias, mimo_v, states, qk_dot, da_cs, da_cs_rev, dt,
                   trap, segsum, angles, mimo_o=None, d=None, chunk_size: int = 16,
                   rotary_dim_divisor: int = 4, output_dtype=None) -> dict:
    """The 12 gradients by fp64 autograd of <y, dPhiO> through the forward output.

    ``states`` and ``qk_dot`` are accepted for signature parity and ignored: the golden
    recomputes the whole forward from its leaves, partial last chunk included.
    """
    del states, qk_dot, rotary_dim_divisor, output_dtype
    f = torch.float64
    B, S, R, G, N = q.shape
    C = chunk_size
    lv = _golden_leaves(q, k, v, q_bias, k_bias, mimo_v, da_cs, da_cs_rev, dt, trap, angles, d, C, f)
    lv = {name: t.detach().clone().requires_grad_(True) for name, t in lv.items()}
    y = _forward_y(**lv, segsum=segsum.to(f), R=R, C=C)
    dphio = _dphio(dout.to(f), None if mimo_o is None else mimo_o.to(f), R)
    g = dict(zip(lv, torch.autograd.grad((y * dphio).sum(), list(lv.values()), allow_unused=True)))
    g = {name: torch.zeros_like(lv[name]) if gi is None else gi for name, gi in g.items()}
    pos = torch.arange(S, device=q.device) // C
    return dict(
        DQ=_qk_grid_to_dq(g["qb"]), DK=_qk_grid_to_dq(g["kb"]), DV=g["v"], DMIMO_V=g["mv"],
        DANGLES=g["ang"], DFACTOR=g["ts"], DGAMMA=g["gd"], DDA=g["a_end"][:, :, pos],
        DSSDA=g["xw"].transpose(-1, -2).contiguous(), DDA_CS_REV=g["e_rev"], DDA_CS=g["e_cs"],
        DD=g["dl"] if d is not None else None,
    )
