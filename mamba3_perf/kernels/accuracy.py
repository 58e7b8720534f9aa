"""The golden criterion: a candidate passes where, per gradient, its error against the fp64
golden is no worse than ``FACTOR`` x the fp32 reference's error plus a small floor.

Errors are relative: ||x - g||_2 / ||g||_2 for most gradients; DDA and DANGLES use the
global max|x - g| / max|g| (their fp32-reference error can sit at the noise floor, where a
norm ratio would blow up). Where the golden is identically zero the absolute error is used.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from mamba3_perf.kernels.reference import GRADIENTS

FACTOR = 5.0
FLOOR = 1e-5
MAX_ABS_GRADIENTS = ("DDA", "DANGLES")


def rel_error(x: torch.Tensor, golden: torch.Tensor, *, max_abs: bool = False) -> float:
    x = x.detach().to(torch.float64).to(golden.device)
    g = golden.detach().to(torch.float64)
    if x.shape != g.shape:
        raise ValueError(f"shape mismatch: {tuple(x.shape)} vs golden {tuple(g.shape)}")
    if not torch.isfinite(x).all():
        return float("inf")
    diff = x - g
    if max_abs:
        num, den = diff.abs().max(), g.abs().max()
    else:
        num, den = diff.norm(), g.norm()
    return float(num / den) if float(den) > 0 else float(num)


@dataclass(frozen=True)
class GradCheck:
    gradient: str
    err: float
    ref_err: float
    bound: float
    passed: bool


def check(candidate: dict, golden: dict, reference: dict, *, factor: float = FACTOR,
          floor: float = FLOOR) -> list[GradCheck]:
    """Per-gradient verdicts for ``candidate`` (a dict of the 12 outputs)."""
    rows = []
    for name in GRADIENTS:
        g, x, r = golden[name], candidate.get(name), reference[name]
        if g is None:
            ok = x is None
            rows.append(GradCheck(name, 0.0 if ok else float("inf"), 0.0, floor, ok))
            continue
        if x is None:
            rows.append(GradCheck(name, float("inf"), 0.0, floor, False))
            continue
        ma = name in MAX_ABS_GRADIENTS
        err, ref_err = rel_error(x, g, max_abs=ma), rel_error(r, g, max_abs=ma)
        bound = factor * ref_err + floor
        rows.append(GradCheck(name, err, ref_err, bound, err <= bound))
    return rows


def passed(rows: list[GradCheck]) -> bool:
    return all(r.passed for r in rows)
