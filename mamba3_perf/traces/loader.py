"""``load(path)``: detect the profiler source of a file or directory and run its parser.

Single files are sniffed by name and first bytes (:func:`detect_file`). Directories are
walked (:func:`find_sources`) and read in the order FORMATS.md prescribes for Ascend:
``kernel_details*.csv`` (torch_npu, richest), else ``op_summary_*.csv`` (msprof), else
``trace_view.json`` / ``msprof_*.json``; for CUDA: Kineto traces, ncu CSVs, proton files.

Error policy: a path that does not exist, a file of no known layout, a directory with no
trace, a directory holding traces of both Ascend and CUDA profilers (mixed devices), or CUDA
outputs of several tools (Kineto + ncu + proton would time the same launches twice):
:class:`ParseError`. A file given directly is parsed even where a directory walk would have
preferred another.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import pandas as pd

from mamba3_perf.errors import ParseError
from mamba3_perf.traces import msprof, ncu, proton, torch_profiler
from mamba3_perf.traces._io import Progress, head_text

# directory walk: (family, kind, file name regex), in preference order within a family
WALK_PATTERNS: tuple[tuple[str, str, str], ...] = (
    ("ascend", "kernel_table", r"^kernel_details(_slice_\d+)?\.csv$"),
    ("ascend", "kernel_table", r"^op_summary(_\d+)*\.csv$"),
    ("ascend", "trace_json", r"^trace_view\.json$"),
    ("ascend", "trace_json", r"^msprof(_\d+)*\.json$"),
    ("cuda", "kineto", r"(trace|kineto)[^/]*\.json(\.gz)?$"),
    ("cuda", "ncu", r"^ncu.*\.csv$"),
    ("cuda", "proton_tree", r"\.hatchet$"),
    ("cuda", "proton_trace", r"\.chrome_trace$"),
)


def detect_file(path: Path) -> str:
    """The parser kind of one file: kernel_table, trace_json, kineto, ncu, proton_tree, proton_trace."""
    name = path.name
    if name.endswith(".hatchet"):
        return "proton_tree"
    if name.endswith(".chrome_trace"):
        return "proton_trace"
    head = head_text(path, 8192).lstrip("\ufeff")
    if not head.strip():
        raise ParseError(f"{path}: empty file")
    first = head.lstrip()[:1]
    if first == "[":
        return "proton_tree" if '"frame"' in head and '"children"' in head else "trace_json"
    if first == "{":
        if '"schemaVersion"' in head or '"deviceProperties"' in head:
            return "kineto"
        if '"traceEvents"' in head:
            return "proton_trace"
        raise ParseError(f"{path}: JSON object without traceEvents; not a known trace")
    lines = [ln for ln in head.splitlines() if ln.strip()]
    data = [ln for ln in lines if not ln.startswith("==")]
    if data and data[0].startswith('"ID"') and '"Kernel Name"' in data[0]:
        return "ncu"
    if data and "(us)" in data[0]:
        return "kernel_table"  # kernel_details / op_summary (op_statistic is refused by the parser)
    if data[1:2] and data[1].startswith('"Address","Source"'):
        raise ParseError(f"{path}: an ncu source page (per SASS instruction, not per kernel launch): "
                         f"read it with `perf sass {path.name}`")
    raise ParseError(f"{path}: unknown trace layout (first line {lines[0][:80] if lines else ''!r})")


def _parsers(progress: Progress | None, clock_khz: float | None) -> dict[str, Callable[[Path], pd.DataFrame]]:
    return {
        "kernel_table": msprof.parse_kernel_table,
        "trace_json": lambda p: msprof.parse_trace_json(p, progress=progress),
        "kineto": lambda p: torch_profiler.parse_kineto(p, progress=progress),
        "ncu": ncu.parse_ncu,
        "proton_tree": proton.parse_proton_tree,
        "proton_trace": lambda p: proton.parse_proton_trace(p, clock_khz=clock_khz, progress=progress),
    }


def find_sources(root: Path) -> list[tuple[str, Path]]:
    """(kind, file) pairs to read under ``root``: for Ascend only the best kind found."""
    found: dict[tuple[str, str], list[Path]] = {}
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        for family, kind, pat in WALK_PATTERNS:
            if re.search(pat, f.name):
                found.setdefault((family, kind), []).append(f)
                break
    families = {fam for fam, _ in found}
    if len(families) > 1:
        raise ParseError(f"{root}: holds both Ascend and CUDA profiler outputs (mixed devices); "
                         "import them separately")
    if not found:
        raise ParseError(f"{root}: no profiler output found (looked for "
                         f"{', '.join(p for _, _, p in WALK_PATTERNS)})")
    if families == {"ascend"}:
        for _, kind, pat in WALK_PATTERNS:
            files = [f for f in found.get(("ascend", kind), []) if re.search(pat, f.name)]
            if files:
                return [(kind, f) for f in files]
    kinds = sorted(kind for _, kind in found)
    if len(kinds) > 1:  # several tools timing the same launches would be counted twice
        raise ParseError(f"{root}: holds outputs of several profilers ({', '.join(kinds)}); "
                         "import one of them")
    return [(kind, f) for files in found.values() for f in files]


def load(path: str | Path, *, case_id: str | None = None, variant: str | None = None,
         progress: Progress | None = None, clock_khz: float | None = None) -> pd.DataFrame:
    """Any supported profiler output (file or directory) -> one KERNEL_EVENTS frame.

    ``case_id`` and ``variant`` (the stage the trace was taken on), when given, are written
    into every row (``variant`` overrides the registry's guess).
    """
    path = Path(path)
    if not path.exists():
        raise ParseError(f"{path}: no such file or directory")
    parsers = _parsers(progress, clock_khz)
    sources = find_sources(path) if path.is_dir() else [(detect_file(path), path)]
    frames = [parsers[kind](f) for kind, f in sources]
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if case_id is not None:
        df["case_id"] = pd.array([case_id] * len(df), dtype="string")
    if variant is not None:
        df["variant"] = pd.array([variant] * len(df), dtype="string")
    return df
