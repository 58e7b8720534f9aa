"""Host-side tail handling: pad a sequence that is not a whole number of chunks, crop after.

The kernels assume S % C == 0. Where it is not, the public API pads every sequence input to
``Sp = ceil(S/C)*C`` (:func:`pad_tail_seq`), rebuilds the last chunk's ``da_cs_rev`` and
``segsum`` over the padded positions (:func:`rebuild_dacs_tail`), runs, then crops every
sequence output back to S and zeroes DSSDA's invalid tail rows/columns (:func:`crop_outputs`).
``states`` needs no change: its chunk count is the same before and after padding.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# Per input: (sequence dim, pad mode). zero: padded q/k/v/dout/angles/qk_dot/dt/trap
# contribute nothing (shifted gamma at S-1 becomes dt[S]*sigmoid(-trap[S]) = 0);
# edge: da_cs keeps its last value, so the padded chunk still ends at da_cs[S-1].
SEQ_INPUTS = {
    "dout": (1, "zero"), "q": (1, "zero"), "k": (1, "zero"), "v": (1, "zero"),
    "angles": (1, "zero"), "qk_dot": (2, "zero"), "dt": (2, "zero"), "trap": (2, "zero"),
    "da_cs": (2, "edge"), "da_cs_rev": (2, "zero"),
}


def padded_len(S: int, C: int) -> int:
    return math.ceil(S / C) * C


def pad_tail_seq(x: torch.Tensor, S_pad: int, dim: int, mode: str = "zero") -> torch.Tensor:
    """Pad ``x`` along ``dim`` to length ``S_pad`` with zeros or by repeating the last element."""
    S = x.shape[dim]
    if S == S_pad:
        return x
    if S > S_pad:
        raise ValueError(f"pad_tail_seq: length {S} along dim {dim} exceeds target {S_pad}")
    if mode == "zero":
        pad = [0, 0] * (x.dim() - 1 - dim) + [0, S_pad - S]
        return F.pad(x, pad)
    if mode == "edge":
        last = x.narrow(dim, S - 1, 1)
        reps = [1] * x.dim()
        reps[dim] = S_pad - S
        return torch.cat([x, last.repeat(*reps)], dim=dim)
    raise ValueError(f"pad_tail_seq: mode must be 'zero' or 'edge', got {mode!r}")


def rebuild_dacs_tail(da_cs: torch.Tensor, da_cs_rev: torch.Tensor, segsum: torch.Tensor,
                      S: int, C: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rebuild the last chunk's da_cs_rev and segsum over padded positions.

    ``da_cs`` is already edge-padded to Sp ([B,H,Sp]); ``da_cs_rev`` zero-padded. Valid
    entries keep the caller's values; padded ones follow da_cs_rev[t] = da_cs[end] - da_cs[t]
    and segsum[i, j] = da_cs[i] - da_cs[j] for i > j (0 on and above the diagonal).
    Returns new (da_cs_rev, segsum).
    """
    Sp = da_cs.shape[-1]
    L = S - (math.ceil(S / C) - 1) * C  # valid length of the last chunk
    if L == C:
        return da_cs_rev, segsum
    start = Sp - C
    da_cs_rev = da_cs_rev.clone()
    last = da_cs[..., start:]  # [B,H,C]
    rebuilt_rev = last[..., -1:] - last
    da_cs_rev[..., start + L:] = rebuilt_rev[..., L:]
    segsum = segsum.clone()
    seg_last = last[..., :, None] - last[..., None, :]  # [B,H,C,C]
    tri = torch.tril(torch.ones(C, C, dtype=torch.bool, device=segsum.device), -1)
    seg_last = torch.where(tri, seg_last, torch.zeros_like(seg_last)).to(segsum.dtype)
    invalid = torch.zeros(C, C, dtype=torch.bool, device=segsum.device)
    invalid[L:, :] = True
    invalid[:, L:] = True
    segsum[:, :, -1] = torch.where(invalid, seg_last, segsum[:, :, -1])
    return da_cs_rev, segsum


def pad_inputs(inputs: dict, S: int, C: int) -> dict:
    """Return a copy of the input dict padded to a whole number of chunks (no-op when S % C == 0)."""
    Sp = padded_len(S, C)
    if Sp == S:
        return dict(inputs)
    out = dict(inputs)
    for name, (dim, mode) in SEQ_INPUTS.items():
        out[name] = pad_tail_seq(inputs[name], Sp, dim, mode).contiguous()
    out["da_cs_rev"], out["segsum"] = rebuild_dacs_tail(out["da_cs"], out["da_cs_rev"],
                                                        inputs["segsum"], S, C)
    return out


def crop_outputs(out: dict, S: int, C: int) -> dict:
    """Crop padded outputs back to S and zero DSSDA's invalid tail rows and columns."""
    Sp = padded_len(S, C)
    if Sp == S:
        return out
    res = dict(out)
    for name in ("DQ", "DK"):
        x = out[name]  # [B, Sp*R, H, N]
        B, SR, H, N = x.shape
        R = SR // Sp
        res[name] = x.view(B, Sp, R, H, N)[:, :S].reshape(B, S * R, H, N)
    for name in ("DV", "DANGLES"):
        res[name] = out[name][:, :S].contiguous()
    for name in ("DFACTOR", "DGAMMA", "DDA", "DDA_CS_REV", "DDA_CS"):
        res[name] = out[name][..., :S].contiguous()
    L = S - (Sp // C - 1) * C
    dssda = out["DSSDA"]
    dssda[:, :, -1, L:, :] = 0
    dssda[:, :, -1, :, L:] = 0
    res["DSSDA"] = dssda
    return res
