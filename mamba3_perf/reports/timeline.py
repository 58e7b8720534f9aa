"""Interactive kernel timeline of a KERNEL_EVENTS frame, as a self-contained plotly HTML file.

Kernels are horizontal bars on a time axis (µs), one lane per (variant, stream), coloured by
stage_tag. Hover shows the kernel name, duration, start and every metric the row has.
With ``align="variant"`` (default) each variant's lanes start at 0, so variants traced one
after another line up; ``align="none"`` keeps the trace's own clock.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from mamba3_perf.reports import STAGE_COLORS, escape, write_html
from mamba3_perf.traces.schema import METRIC_COLUMNS

_EXTRA_HOVER = ("registers_per_thread", "smem_bytes", "block_dim", "grid", "block", "region")


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)


def _details(df: pd.DataFrame) -> list[str]:
    cols = [c for c in (*_EXTRA_HOVER, *METRIC_COLUMNS) if c in df.columns and df[c].notna().any()]
    out = []
    for rec in df[cols].itertuples(index=False, name=None):
        parts = [f"{escape(c)}: {escape(_fmt(v))}" for c, v in zip(cols, rec) if not pd.isna(v)]
        out.append("<br>".join(parts))
    return out


def timeline_figure(events: pd.DataFrame, *, title: str = "bwd_bwd kernel timeline",
                    align: str = "variant") -> go.Figure:
    """Build the timeline figure; ``events`` needs kernel_name, stage_tag, start_us, dur_us."""
    if align not in ("variant", "none"):
        raise ValueError(f"align must be 'variant' or 'none', got {align!r}")
    df = events.reset_index(drop=True).copy()
    variant = df["variant"].astype("string").fillna("?") if "variant" in df else pd.Series("?", index=df.index)
    stream = df["stream"].astype("string").fillna("-") if "stream" in df else pd.Series("-", index=df.index)
    df["_lane"] = [escape(f"{v} | stream {s}") for v, s in zip(variant, stream)]
    start = df["start_us"].astype("float64")
    if align == "variant":
        start = start - start.groupby(variant).transform("min")
    df["_start"] = start
    df["_name"] = [escape(n) for n in df["kernel_name"]]
    df["_detail"] = _details(df) if len(df) else []
    tags = df["stage_tag"].astype("string").fillna("other")
    order = [t for t in STAGE_COLORS if t in set(tags)] + sorted(set(tags) - set(STAGE_COLORS))
    fig = go.Figure()
    for tag in order:
        sub = df[tags == tag]
        custom = np.column_stack([sub["_name"], sub["dur_us"].map(_fmt), sub["_start"].map(_fmt),
                                  sub["_detail"]])
        fig.add_trace(go.Bar(
            orientation="h", y=sub["_lane"], x=sub["dur_us"], base=sub["_start"],
            name=escape(tag), marker_color=STAGE_COLORS.get(tag, "#888888"),
            customdata=custom,
            hovertemplate=("<b>%{customdata[0]}</b><br>stage: " + escape(tag)
                           + "<br>duration: %{customdata[1]} µs<br>start: %{customdata[2]} µs"
                           + "<br>%{customdata[3]}<extra></extra>"),
        ))
    lanes = list(dict.fromkeys(df["_lane"]))
    fig.update_layout(
        title=escape(title), barmode="overlay", bargap=0.3,
        xaxis_title="time (µs)" + (", each variant from 0" if align == "variant" else ""),
        yaxis=dict(categoryorder="array", categoryarray=lanes[::-1], title="variant | stream"),
        legend_title="stage", height=max(300, 120 + 40 * len(lanes)), template="plotly_white",
    )
    return fig


def write_timeline(events: pd.DataFrame, path: str | os.PathLike, *,
                   title: str = "bwd_bwd kernel timeline", align: str = "variant") -> Path:
    """Write the timeline as one HTML file that opens offline (plotly.js inlined)."""
    return write_html(timeline_figure(events, title=title, align=align), path)
