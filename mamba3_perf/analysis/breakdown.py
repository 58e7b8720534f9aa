"""Stage breakdown of a KERNEL_EVENTS frame: where the device time goes, per stage tag.

Pure: DataFrame in, DataFrame out; no plotting, no I/O.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from mamba3_perf.traces.schema import COLUMNS, COUNT_COLUMNS, METRIC_COLUMNS

TAG_ORDER = ("pre", "aux", "scan", "post", "fused", "host", "other")
BASE_COLUMNS = ("total_us", "share", "count")
# the warp-state columns (Nsight Compute): cycles between a warp's instructions, and its parts
STALL_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c.startswith("stall_"))
WARP_STATE_COLUMNS: tuple[str, ...] = ("cycles_per_issue",) + STALL_COLUMNS


def _weighted_means(g: pd.DataFrame, columns=METRIC_COLUMNS) -> dict[str, float]:
    """Each of ``columns`` as its duration-weighted mean over the rows of ``g`` that have it."""
    out = {}
    for m in columns:
        if m not in g.columns:
            out[m] = np.nan
            continue
        ok = g[m].notna() & (g["dur_us"] > 0)
        w = g.loc[ok, "dur_us"].to_numpy(float)
        out[m] = float(np.dot(g.loc[ok, m].to_numpy(float), w) / w.sum()) if w.sum() > 0 else np.nan
    return out


def _sums(g: pd.DataFrame) -> dict[str, float]:
    return {m: float(g[m].sum(min_count=1)) if m in g.columns else np.nan for m in COUNT_COLUMNS}


def stage_breakdown(df: pd.DataFrame) -> pd.DataFrame:
    """Per stage_tag (per variant, and per region for region rows): time, share, count, metrics.

    Columns: ``[variant,] stage_tag, [region,] total_us`` (sum of ``dur_us``), ``share``
    (of the variant's total), ``count`` (executions: ``calls`` where given, else rows), the
    schema's hardware counts (DRAM bytes, executed instructions) summed over the rows that have
    them, then every metric column of the schema as a duration-weighted mean over the rows that
    have it (NaN where none do). ``variant`` / ``region`` keys appear only when the input has them.
    A frame mixing whole-kernel rows and region rows is refused (ValueError): adding them
    would count the kernel twice.
    """
    has_variant = "variant" in df.columns and df["variant"].notna().any()
    has_region = "region" in df.columns and df["region"].notna().any()
    if has_region and df["region"].isna().any():
        raise ValueError("stage_breakdown: frame mixes whole-kernel rows and region rows; "
                         "filter one kind first (df[df.region.isna()] or df[df.region.notna()])")
    keys = (["variant"] if has_variant else []) + ["stage_tag"] + (["region"] if has_region else [])
    columns = keys + list(BASE_COLUMNS) + list(COUNT_COLUMNS) + list(METRIC_COLUMNS)
    if df.empty:
        dtypes = {**{k: "string" for k in keys}, "count": "int64"}
        return pd.DataFrame({c: pd.Series([], dtype=dtypes.get(c, "float64")) for c in columns})
    work = df.copy()
    work["_n"] = work["calls"].fillna(1) if "calls" in work.columns else 1
    rows = []
    for key, g in work.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), "total_us": float(g["dur_us"].sum()),
                     "count": int(g["_n"].sum()), **_sums(g), **_weighted_means(g)})
    out = pd.DataFrame(rows)
    scope = out["variant"].fillna("") if has_variant else pd.Series("", index=out.index)
    totals = out.groupby(scope)["total_us"].transform("sum")
    out["share"] = (out["total_us"] / totals.replace(0, np.nan)).astype(float)
    order = {t: i for i, t in enumerate(TAG_ORDER)}
    out["_o"] = out["stage_tag"].map(lambda t: order.get(t, len(order)))
    sort = (["variant"] if has_variant else []) + ["_o"]  # regions keep their input order
    out = out.sort_values(sort, kind="stable").reset_index(drop=True)
    for k in keys:
        out[k] = out[k].astype("string")
    return out[columns]


def leading_stall(row) -> tuple[str, float, float] | None:
    """(reason, cycles, share of cycles_per_issue) of the stall_* column that is largest in
    ``row`` (a mapping), or None where the row has no stall values."""
    vals = {c: row.get(c) for c in STALL_COLUMNS}
    vals = {c: float(v) for c, v in vals.items() if v is not None and not pd.isna(v)}
    if not vals:
        return None
    col = max(vals, key=vals.get)
    total = row.get("cycles_per_issue")
    share = vals[col] / float(total) if total is not None and not pd.isna(total) and total > 0 else np.nan
    return col.removeprefix("stall_"), vals[col], share


def kernel_stalls(df: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (and variant, stage tag) with warp-state data: device time, then
    cycles_per_issue and each stall_* column as duration-weighted means over its launches, and
    ``leading`` (the largest stall's reason). Longest kernels first; empty where no row of ``df``
    has cycles_per_issue."""
    keys = [k for k in ("variant", "stage_tag", "kernel_name") if k in df.columns]
    columns = keys + ["total_us", *WARP_STATE_COLUMNS, "leading"]
    have = df[df["cycles_per_issue"].notna()] if "cycles_per_issue" in df.columns else df.iloc[:0]
    if have.empty:
        return pd.DataFrame({c: pd.Series([], dtype="string" if c in (*keys, "leading") else "float64")
                             for c in columns})
    rows = []
    for key, g in have.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        rec = {**dict(zip(keys, key)), "total_us": float(g["dur_us"].sum()),
               **_weighted_means(g, WARP_STATE_COLUMNS)}
        lead = leading_stall(rec)
        rec["leading"] = lead[0] if lead else pd.NA
        rows.append(rec)
    out = pd.DataFrame(rows).sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    for k in (*keys, "leading"):
        out[k] = out[k].astype("string")
    return out[columns]


def dram_floor_us(dram_bytes, hbm_bytes_per_s: float):
    """Microseconds that ``dram_bytes`` (a number or a Series) take at ``hbm_bytes_per_s``."""
    return dram_bytes / float(hbm_bytes_per_s) * 1e6


def kernel_traffic(df: pd.DataFrame, hbm_bytes_per_s: float) -> pd.DataFrame:
    """Per kernel (and variant, stage tag) with measured DRAM bytes (Nsight Compute): device
    time, DRAM bytes, ``floor_us`` (the time those bytes take at ``hbm_bytes_per_s``, the
    device's HBM bandwidth) and ``vs_floor`` (device time / floor: 1 is a kernel that does
    nothing but move its bytes at full bandwidth). Launches of one kernel are summed; longest
    kernels first; empty where no row has dram_bytes.

    The floor is of the traffic the kernel causes, spills and re-reads included, not of the
    problem's unique bytes (analysis.limits' HBM roofline): summed over a stage's kernels, it
    is the least time that design takes however well each kernel is tuned."""
    keys = [k for k in ("variant", "stage_tag", "kernel_name") if k in df.columns]
    columns = keys + ["total_us", "dram_bytes", "floor_us", "vs_floor"]
    have = df[df["dram_bytes"].notna()] if "dram_bytes" in df.columns else df.iloc[:0]
    if have.empty:
        return pd.DataFrame({c: pd.Series([], dtype="string" if c in keys else "float64") for c in columns})
    out = (have.groupby(keys, dropna=False, sort=False)
           .agg(total_us=("dur_us", "sum"), dram_bytes=("dram_bytes", "sum")).reset_index())
    out["floor_us"] = dram_floor_us(out["dram_bytes"], hbm_bytes_per_s)
    out["vs_floor"] = out["total_us"] / out["floor_us"].where(out["floor_us"] > 0)
    out = out.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    for k in keys:
        out[k] = out[k].astype("string")
    return out[columns].astype({c: "float64" for c in columns[len(keys):]})
