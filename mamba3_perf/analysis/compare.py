"""Compare two runs' timings, flagging only changes larger than the measured spread.

A case/variant counts as changed only when the two runs' p10-p90 intervals do not overlap:
slower when ``p10_b > p90_a``, faster when ``p90_b < p10_a``. Each interval is that run's
own measured repetition spread, so a change must exceed the noise of both runs. Rows that
lack p10/p90 are never flagged ("no spread").
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from mamba3_perf.analysis.ladder import variant_order

COMPARE_COLUMNS = ("case_id", "variant", "status_a", "status_b", "median_a_us", "median_b_us",
                   "delta_us", "delta_pct", "spread_a_us", "spread_b_us", "changed", "verdict")


def _timings_of(run) -> pd.DataFrame:
    return run.table("timings") if hasattr(run, "table") else run


def compare_runs(run_a, run_b) -> pd.DataFrame:
    """Per case, per variant: median of b minus median of a, and whether it is beyond noise.

    ``run_a`` / ``run_b`` are :class:`mamba3_perf.runs.Run` objects or ``timings`` frames.
    ``verdict`` is one of: faster, slower, within noise, no spread, status changed,
    only in a, only in b, not timed.
    """
    keep = ["case_id", "variant", "status", "median_us", "p10_us", "p90_us"]
    a, b = (_timings_of(r).reindex(columns=keep) for r in (run_a, run_b))
    m = a.merge(b, on=["case_id", "variant"], how="outer", suffixes=("_a", "_b"), indicator=True)
    for s in ("a", "b"):
        ok = m[f"status_{s}"] == "ok"
        for c in ("median_us", "p10_us", "p90_us"):
            m[f"{c}_{s}"] = m[f"{c}_{s}"].astype("float64").where(ok)
    m["median_a_us"], m["median_b_us"] = m["median_us_a"], m["median_us_b"]
    m["delta_us"] = m["median_b_us"] - m["median_a_us"]
    m["delta_pct"] = 100.0 * m["delta_us"] / m["median_a_us"]
    m["spread_a_us"] = m["p90_us_a"] - m["p10_us_a"]
    m["spread_b_us"] = m["p90_us_b"] - m["p10_us_b"]
    slower = m["p10_us_b"] > m["p90_us_a"]
    faster = m["p90_us_b"] < m["p10_us_a"]
    no_spread = m[["p10_us_a", "p90_us_a", "p10_us_b", "p90_us_b"]].isna().any(axis=1)
    status_changed = (m["status_a"].astype("string") != m["status_b"].astype("string")).fillna(False)
    verdict = np.select(
        [m["_merge"] == "left_only", m["_merge"] == "right_only", status_changed,
         m["median_a_us"].isna(), no_spread, slower, faster],
        ["only in a", "only in b", "status changed", "not timed", "no spread", "slower", "faster"],
        default="within noise")
    m["verdict"] = pd.Series(verdict, index=m.index, dtype="string")
    m["changed"] = m["verdict"].isin(["slower", "faster", "status changed"])
    order = {v: i for i, v in enumerate(variant_order(m["variant"]))}
    m = m.assign(_vo=m["variant"].map(order)).sort_values(["case_id", "_vo"], kind="stable")
    return m[list(COMPARE_COLUMNS)].reset_index(drop=True)
