"""Plotly charts of a run: stage breakdown per variant, speedup ladder per case.

Figures are returned; :func:`mamba3_perf.reports.write_html` writes one as a self-contained file.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from mamba3_perf.analysis.ladder import LADDER, TILELANG, variant_order
from mamba3_perf.reports import STAGE_COLORS, escape


def stage_breakdown_chart(breakdown: pd.DataFrame, *,
                          title: str = "Device time per stage tag") -> go.Figure:
    """Stacked bars: per variant, the total µs of each stage_tag.

    ``breakdown`` needs columns variant, stage_tag, total_us (one row per pair).
    """
    df = breakdown.copy()
    variants = variant_order(df["variant"].astype(str))
    tags = [t for t in STAGE_COLORS if t in set(df["stage_tag"])]
    tags += sorted(set(df["stage_tag"].astype(str)) - set(tags))
    fig = go.Figure()
    for tag in tags:
        sub = df[df["stage_tag"] == tag].groupby("variant")["total_us"].sum()
        y = [float(sub.get(v, 0.0)) for v in variants]
        fig.add_trace(go.Bar(
            x=[escape(v) for v in variants], y=y, name=escape(tag),
            marker_color=STAGE_COLORS.get(tag, "#888888"),
            hovertemplate="%{x}<br>" + escape(tag) + ": %{y:.4g} µs<extra></extra>"))
    fig.update_layout(title=escape(title), barmode="stack", yaxis_title="µs",
                      xaxis_title="variant", legend_title="stage", template="plotly_white")
    return fig


def speedup_ladder_chart(ladder: pd.DataFrame, *,
                         title: str = "Speedup vs stage0 along the ladder") -> go.Figure:
    """One line per case: speedup vs stage0 at each ladder step, TileLang as the last point.

    ``ladder`` is :func:`mamba3_perf.analysis.ladder.ladder_table` output. The TileLang point
    is stage0 time / TileLang time (live or recorded). Log y axis.
    """
    steps = [v for v in variant_order(ladder["variant"]) if v in LADDER]
    fig = go.Figure()
    for case_id, sub in ladder.groupby("case_id", sort=True):
        s = sub.set_index("variant")
        xs = [escape(v) for v in steps]
        ys = [s["speedup_vs_stage0"].get(v, float("nan")) for v in steps]
        tl = s["stage0_us"] / s["tilelang_us"]
        if tl.notna().any():
            xs.append(TILELANG)
            ys.append(float(tl.dropna().iloc[0]))
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines+markers", name=escape(case_id),
            hovertemplate=escape(case_id) + "<br>%{x}: %{y:.3g}x<extra></extra>"))
    fig.update_layout(title=escape(title), yaxis_type="log", yaxis_title="speedup vs stage0 (x)",
                      xaxis_title="variant", legend_title="case", template="plotly_white")
    return fig
