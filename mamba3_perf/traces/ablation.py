"""Region split of a fused kernel by ablation (source ``ablation``).

Method: time the full kernel (``full_us``), then variants each with one region removed
(``variants[region]``). A region's time is ``full_us - variants[region]``; what no removal
accounts for is the region ``other``. Rows are laid end to end (``start_kind`` =
``serialized``); ``source`` says the split came from ablation, not from in-kernel timers.

Error policy: a non-positive or non-finite time, a removal that makes the kernel slower, or
removals that together exceed the full time (regions not additive): :class:`ParseError`.
"""
from __future__ import annotations

import math

import pandas as pd

from mamba3_perf.errors import ParseError
from mamba3_perf.traces._io import serialized_starts
from mamba3_perf.traces.attribution import label
from mamba3_perf.traces.schema import conform

REMAINDER = "other"


def region_split_from_ablation(full_us: float, variants: dict[str, float], *,
                               kernel_name: str = "bwd_bwd_fused_kernel",
                               device: str = "unknown") -> pd.DataFrame:
    """Per-region times of ``kernel_name`` from ablation timings (µs); last row is ``other``."""
    times = {"full": full_us, **variants}
    bad = {k: v for k, v in times.items() if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)}
    if bad:
        raise ParseError(f"ablation: times must be positive finite µs, got {bad}")
    if REMAINDER in variants:
        raise ParseError(f"ablation: region name {REMAINDER!r} is reserved for the remainder")
    split = {r: full_us - v for r, v in variants.items()}
    slower = {r: v for r, v in variants.items() if split[r] < 0}
    if slower:
        raise ParseError(f"ablation: removing {sorted(slower)} made the kernel slower than full "
                         f"({full_us} µs): {slower}; the split is undefined")
    rest = full_us - sum(split.values())
    if rest < 0:
        raise ParseError(f"ablation: removed regions sum to {sum(split.values()):.3f} µs > full "
                         f"{full_us} µs (regions overlap; not additive)")
    split[REMAINDER] = rest
    df = pd.DataFrame({"region": list(split), "dur_us": list(split.values())})
    df["kernel_name"] = kernel_name
    df["device"] = device
    df["start_us"] = serialized_starts(list(df["dur_us"]))
    df["start_kind"] = "serialized"
    df["source"] = "ablation"
    return conform(label(df), origin="ablation")
