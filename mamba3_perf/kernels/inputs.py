"""Deterministic inputs: a consistent set of all 19 bwd_bwd inputs for a case, on any device."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mamba3_perf.kernels.cases import Case
from mamba3_perf.kernels.reference import forward_cache

INPUT_NAMES = ("dout", "q", "k", "v", "q_bias", "k_bias", "mimo_v", "states", "qk_dot", "da_cs",
               "da_cs_rev", "dt", "trap", "segsum", "angles", "mimo_o", "d")


def dacs_segsum(da: torch.Tensor, chunk_size: int):
    """From dA [B,H,S] (fp32): da_cs (in-chunk cumsum), da_cs_rev (sum of later steps in the
    chunk) [B,H,S], and segsum [B,H,nc,C,C] (segsum[i,j] = sum dA[j+1..i], i > j; else 0).
    A partial last chunk is treated as zero-padded dA, as upstream's kernel loads it."""
    B, H, S = da.shape
    C = chunk_size
    nc = math.ceil(S / C)
    dap = F.pad(da, (0, nc * C - S)).reshape(B, H, nc, C)
    cs = dap.cumsum(-1)
    rev = cs[..., -1:] - cs
    seg = cs[..., :, None] - cs[..., None, :]
    seg = seg.masked_fill(~torch.tril(torch.ones(C, C, dtype=torch.bool, device=da.device), -1), 0.0)
    return cs.reshape(B, H, -1)[..., :S].contiguous(), rev.reshape(B, H, -1)[..., :S].contiguous(), seg.contiguous()


def make_inputs(case: Case, *, seed: int = 0, device: str | torch.device = "cpu",
                states_dtype: torch.dtype = torch.float32) -> dict:
    """All inputs of ``mamba3_mimo_bwd_bwd`` for ``case`` as keyword arguments.

    Drawn like upstream's tests (randn activations, rand angles, dt = softplus(-3 + randn),
    dA = -dt * rand), with q/k/bias scaled by N**-0.25 so q.k stays O(1) at any N; states
    and qk_dot come from the fp32 forward cache, so the set is consistent. The generator is
    seeded on the CPU so every device gets the same numbers.
    """
    B, S, H, G, N, P, R, C = case.B, case.S, case.H, case.G, case.N, case.P, case.R, case.C
    dtype = case.torch_dtype
    g = torch.Generator().manual_seed(seed)
    f = torch.float32

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g, dtype=f) * scale

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=f)

    qs = N ** -0.25
    t = dict(
        q=randn(B, S, R, G, N, scale=qs).to(dtype),
        k=randn(B, S, R, G, N, scale=qs).to(dtype),
        v=randn(B, S, H, P).to(dtype),
        q_bias=randn(H, R, N, scale=qs),
        k_bias=randn(H, R, N, scale=qs),
        mimo_v=randn(H, R, P) / R,
        mimo_o=randn(H, R, P) / R if case.reduce_o else None,
        d=randn(H) if case.has_d else None,
        angles=rand(B, S, H, case.rd),
    )
    dt = F.softplus(-3.0 + randn(B, H, S))
    da = -dt * rand(B, H, S)
    t["dt"] = dt
    t["trap"] = rand(B, H, S).to(dtype)
    t["da_cs"], t["da_cs_rev"], t["segsum"] = dacs_segsum(da, C)
    t["dout"] = (randn(B, S, H, P) if case.reduce_o else randn(B, S, R, H, P)).to(dtype)
    t["states"], t["qk_dot"] = forward_cache(
        t["q"], t["k"], t["v"], t["q_bias"], t["k_bias"], t["mimo_v"], t["da_cs"], t["da_cs_rev"],
        t["dt"], t["trap"], t["angles"], chunk_size=C, states_dtype=states_dtype)
    return {name: (None if t[name] is None else t[name].to(device).contiguous()) for name in INPUT_NAMES}


def call_kwargs(case: Case) -> dict:
    """The non-tensor keyword arguments matching ``case``."""
    return dict(chunk_size=case.C, rotary_dim_divisor=case.rotary_dim_divisor)
