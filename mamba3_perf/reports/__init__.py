"""Reports over stored runs: rich console tables, plotly HTML charts and timelines, markdown records.

Modules: :mod:`.console` (rich tables as text), :mod:`.timeline` (interactive kernel timeline),
:mod:`.charts` (stage breakdown and speedup ladder), :mod:`.markdown` (the optimization record).
Every function takes DataFrames/dicts and returns a string or writes one file atomically. Names
that come from traces or tables are data: they are escaped before they reach HTML or markup.
"""
from __future__ import annotations

import html
import os
from pathlib import Path

import pandas as pd

from mamba3_perf.runs import write_text_atomic

STAGE_COLORS: dict[str, str] = {
    "pre": "#4C78A8", "aux": "#F58518", "scan": "#E45756", "post": "#72B7B2",
    "fused": "#54A24B", "host": "#B279A2", "other": "#9D755D",
}


def escape(value) -> str:
    """HTML-escape any value for plotly text (hover, titles, axis labels)."""
    return html.escape("" if value is None else str(value), quote=True)


def fmt_us(v) -> str:
    """Microseconds as a table cell: four significant digits, whole numbers with thousands
    separators from 10,000 up (interpreter times run to 1e6 µs); "-" where missing."""
    if v is None or pd.isna(v):
        return "-"
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def write_html(fig, path: str | os.PathLike) -> Path:
    """Write a plotly figure as one self-contained HTML file (plotly.js inlined), atomically."""
    return write_text_atomic(path, fig.to_html(include_plotlyjs=True, full_html=True))


__all__ = ["STAGE_COLORS", "escape", "fmt_us", "write_html"]
