"""The public entry point ``mamba3_mimo_bwd_bwd``: validate, pad a tail, run a stage, crop."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mamba3_perf.errors import ShapeError
from mamba3_perf.kernels import tail
from mamba3_perf.kernels.registry import get_stage

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class Meta:
    """Problem sizes as the kernels see them (S is the padded length)."""

    B: int
    S: int
    H: int
    G: int
    N: int
    P: int
    R: int
    C: int
    RD: int
    reduce_o: bool
    has_d: bool

    @property
    def nchunks(self) -> int:
        return self.S // self.C


def _expect(name: str, t, shape: tuple, *, allow_none: bool = False) -> None:
    if t is None:
        if allow_none:
            return
        raise ShapeError(f"{name}: expected a tensor of shape {list(shape)}, received None")
    if not isinstance(t, torch.Tensor):
        raise ShapeError(f"{name}: expected a torch.Tensor, received {type(t).__name__}")
    if tuple(t.shape) != tuple(shape):
        raise ShapeError(f"{name}: expected shape {list(shape)}, received {list(t.shape)}")
    if t.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{name}: expected a floating dtype (float16, bfloat16, float32), received {t.dtype}")


def validate(dout, q, k, v, q_bias, k_bias, mimo_v, states, qk_dot, da_cs, da_cs_rev, dt, trap,
             segsum, angles, mimo_o, d, chunk_size, rotary_dim_divisor) -> Meta:
    """Raise ShapeError naming the argument and expected vs received; return the sizes."""
    if not isinstance(q, torch.Tensor) or q.dim() != 5:
        got = list(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__
        raise ShapeError(f"q: expected a 5-d tensor [B,S,R,G,N], received {got}")
    B, S, R, G, N = q.shape
    if not isinstance(v, torch.Tensor) or v.dim() != 4:
        got = list(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
        raise ShapeError(f"v: expected a 4-d tensor [B,S,H,P], received {got}")
    H, P = v.shape[2], v.shape[3]
    C = chunk_size
    if not isinstance(C, int) or C <= 0 or C & (C - 1):
        raise ShapeError(f"chunk_size: expected a positive power of two, received {C!r}")
    if R not in (1, 2, 4, 8):
        raise ShapeError(f"q: expected MIMO rank R in {{1, 2, 4, 8}}, received R={R}")
    if C * R < 16:
        raise ShapeError(f"chunk_size*R: expected >= 16 (tl.dot tile), received {C}*{R}={C * R}")
    if H % G:
        raise ShapeError(f"v/q: expected H % G == 0, received H={H}, G={G}")
    if N % 2:
        raise ShapeError(f"q: expected an even head dim N, received N={N}")
    if not isinstance(rotary_dim_divisor, int) or rotary_dim_divisor < 2:
        raise ShapeError(f"rotary_dim_divisor: expected an integer >= 2 (RD <= N/2), received {rotary_dim_divisor!r}")
    RD = N // rotary_dim_divisor
    nc = math.ceil(S / C)
    _expect("q", q, (B, S, R, G, N))
    _expect("k", k, (B, S, R, G, N))
    _expect("v", v, (B, S, H, P))
    _expect("dout", dout, (B, S, H, P) if mimo_o is not None else (B, S, R, H, P))
    _expect("q_bias", q_bias, (H, R, N))
    _expect("k_bias", k_bias, (H, R, N))
    _expect("mimo_v", mimo_v, (H, R, P))
    _expect("mimo_o", mimo_o, (H, R, P), allow_none=True)
    _expect("states", states, (B, H, nc, N, P))
    _expect("qk_dot", qk_dot, (B, H, S, R, R))
    for name, t in (("da_cs", da_cs), ("da_cs_rev", da_cs_rev), ("dt", dt), ("trap", trap)):
        _expect(name, t, (B, H, S))
    _expect("segsum", segsum, (B, H, nc, C, C))
    _expect("angles", angles, (B, S, H, RD))
    _expect("d", d, (H,), allow_none=True)
    for name, t in (("k", k), ("v", v), ("dout", dout)):
        if t.dtype != q.dtype:
            raise ShapeError(f"{name}: expected the dtype of q ({q.dtype}), received {t.dtype}")
    named = dict(dout=dout, q=q, k=k, v=v, q_bias=q_bias, k_bias=k_bias, mimo_v=mimo_v, states=states,
                 qk_dot=qk_dot, da_cs=da_cs, da_cs_rev=da_cs_rev, dt=dt, trap=trap, segsum=segsum,
                 angles=angles, mimo_o=mimo_o, d=d)
    for name, t in named.items():
        if t is not None and t.device != q.device:
            raise ShapeError(f"{name}: expected device {q.device} (that of q), received {t.device}")
    for name in ("dout", "q", "k", "v", "states", "qk_dot", "segsum", "angles", "da_cs", "da_cs_rev", "dt", "trap"):
        if not named[name].is_contiguous():
            raise ShapeError(f"{name}: expected a contiguous tensor (call .contiguous() first; "
                             f"an implicit copy would hide a copy kernel in profiles)")
    return Meta(B=B, S=tail.padded_len(S, C), H=H, G=G, N=N, P=P, R=R, C=C, RD=RD,
                reduce_o=mimo_o is not None, has_d=d is not None)


def _f32(t: torch.Tensor, contiguous: bool = False) -> torch.Tensor:
    """``t`` as fp32 (and contiguous), itself where it already is: the no-op .to / .contiguous
    calls cost the host a dispatch each, per call."""
    if t.dtype != torch.float32:
        t = t.to(torch.float32)
    return t.contiguous() if contiguous and not t.is_contiguous() else t


def allocate_outputs(meta: Meta, q_dtype, k_dtype, v_dtype, device, *, zero: bool) -> dict:
    """Output buffers at the padded length: zeros, or empty where the stage writes all of them."""
    B, S, H, N, P, R, C = meta.B, meta.S, meta.H, meta.N, meta.P, meta.R, meta.C
    alloc = torch.zeros if zero else torch.empty
    f = torch.float32
    return dict(
        DQ=alloc(B, S * R, H, N, dtype=q_dtype, device=device),
        DK=alloc(B, S * R, H, N, dtype=k_dtype, device=device),
        DV=alloc(B, S, H, P, dtype=v_dtype, device=device),
        DMIMO_V=alloc(B, H, R, P, dtype=f, device=device),
        DANGLES=alloc(B, S, H, meta.RD, dtype=f, device=device),
        DFACTOR=alloc(B, H, S, dtype=f, device=device),
        DGAMMA=alloc(B, H, S, dtype=f, device=device),
        DDA=alloc(B, H, S, dtype=f, device=device),
        DSSDA=alloc(B, H, S // C, C, C, dtype=f, device=device),
        DDA_CS_REV=alloc(B, H, S, dtype=f, device=device),
        DDA_CS=alloc(B, H, S, dtype=f, device=device),
        DD=alloc(B, H, dtype=f, device=device) if meta.has_d else None,
    )


def mamba3_mimo_bwd_bwd(dout, q, k, v, q_bias, k_bias, mimo_v, states, qk_dot, da_cs, da_cs_rev,
                        dt, trap, segsum, angles, mimo_o=None, d=None, chunk_size: int = 16,
                        rotary_dim_divisor: int = 4, output_dtype=None, stage: str = "stage0") -> dict:
    """Mamba-3 MIMO combined backward, second pass: the 12 gradients.

    Args:
        dout: [B,S,H,P] (reduce-O, with ``mimo_o``) or [B,S,R,H,P] (per rank).
        q, k: [B,S,R,G,N]; v: [B,S,H,P] (one dtype: fp16, bf16 or fp32).
        q_bias, k_bias: [H,R,N]; mimo_v, mimo_o: [H,R,P]; d: [H] or None.
        states: [B,H,ceil(S/C),N,P], the state entering each chunk; qk_dot: [B,H,S,R,R].
        da_cs, da_cs_rev, dt, trap: [B,H,S]; segsum: [B,H,ceil(S/C),C,C] fp32;
        angles: [B,S,H,N/rotary_dim_divisor] fp32.
        output_dtype: dtype of DQ, DK, DV (default: that of q, k, v).
        stage: a registered ladder stage (``perf stages`` lists them).

    Returns:
        dict with DQ, DK [B,S*R,H,N]; DV [B,S,H,P]; DMIMO_V [B,H,R,P] (per batch: sum over
        B yourself); DANGLES [B,S,H,RD]; DFACTOR, DGAMMA, DDA, DDA_CS_REV, DDA_CS [B,H,S];
        DSSDA [B,H,ceil(S/C),C,C]; DD [B,H] or None. All fp32 except DQ/DK/DV.

    Raises:
        ShapeError (a ValueError) naming the argument, before any launch.
    """
    spec = get_stage(stage)
    meta = validate(dout, q, k, v, q_bias, k_bias, mimo_v, states, qk_dot, da_cs, da_cs_rev, dt,
                    trap, segsum, angles, mimo_o, d, chunk_size, rotary_dim_divisor)
    if output_dtype is not None and output_dtype not in FLOAT_DTYPES:
        raise ShapeError(f"output_dtype: expected float16, bfloat16 or float32, received {output_dtype}")
    S = q.shape[1]
    seq = dict(dout=dout, q=q, k=k, v=v, angles=_f32(angles), qk_dot=qk_dot, dt=_f32(dt),
               trap=trap,  # in its own dtype: the kernels widen it (common.step_scalars)
               da_cs=_f32(da_cs), da_cs_rev=_f32(da_cs_rev), segsum=_f32(segsum))
    x = tail.pad_inputs(seq, S, chunk_size)
    x.update(states=states, q_bias=_f32(q_bias, True), k_bias=_f32(k_bias, True), mimo_v=_f32(mimo_v, True),
             mimo_o=None if mimo_o is None else _f32(mimo_o, True), d=None if d is None else _f32(d, True))
    out = allocate_outputs(meta, output_dtype or q.dtype, output_dtype or k.dtype,
                           output_dtype or v.dtype, q.device, zero=spec.zero_outputs)
    spec.entry(x, out, meta)
    return tail.crop_outputs(out, S, chunk_size)
