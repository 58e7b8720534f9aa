"""The optimization ladder from a ``timings`` table: speedups, gaps to TileLang, step gains.

Conventions (columns are snake_case with units):

* ``speedup_vs_stage0`` = stage0 median / variant median, on a case where both are "ok".
* ``ratio_vs_tilelang`` = variant median / TileLang median (a time ratio: 2.0 is twice as slow).
  The TileLang time is the live ``tilelang`` row of the same table when it was timed ("ok", or
  "wrong" by the golden bound, which upstream's bf16 arithmetic misses), else the
  recorded GPU baseline (:func:`load_gpu_baseline`) matched by shape; ``tilelang_source``
  says which ("live", "recorded" or NA).
* Speedups vs stage0 are averaged (geometric mean) over the cases stage0 can run, those it
  cannot run listed apart; step gains and TileLang ratios over every case they exist for.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from mamba3_perf.errors import CaseError, ParseError
from mamba3_perf.kernels.cases import Case, dtype_name, get_case, parse_dtype

# The registry's order (kernels.list_stages()), kept here as data so that the analysis of
# recorded runs needs no Triton; tests check the two agree.
LADDER: tuple[str, ...] = ("stage0", "stage1_pre", "stage2_aux", "stage3_rankfold",
                           "stage4_nblock", "stage5_rankloop", "prod", "stage6_statepass",
                           "stage7_streamaux", "stage8_mixprec", "stage9_termsblock",
                           "stage10_fewscratch", "stage11_steptrig",
                           "stage12_pipeaux", "stage13_diagpost",
                           "stage14_latesums", "stage15_passwave", "stage16_regcap",
                           "stage17_scanpass", "stage18_widechunk", "stage19_splitdot",
                           "stage20_auxinc", "stage21_halves", "stage22_lkqblock",
                           "stage23_gluonterms", "stage24_gluonaux", "stage25_subchunk",
                           "stage26_widep", "stage27_rotinline",
                           "stage28_termsdk", "stage29_auxdq", "stage30_stepdesc",
                           "stage31_chunkpairs", "stage32_banks", "stage33_chunksum", "stage34_poststeps",
                           "stage37_bf16split", "stage38_bf16aux", "stage39_auxregs",
                           "stage40_termsring", "stage41_streamregs", "stage42_precap",
                           "stage43_finish", "stage45_diagfold")
BASELINE_VARIANT = "stage0"
TILELANG = "tilelang"
SHAPE_KEY: tuple[str, ...] = ("B", "S", "H", "G", "N", "P", "R", "C", "dtype")
_BASELINE_FILE = "tilelang-h200.json"


def variant_order(variants: Iterable[str]) -> list[str]:
    """Ladder stages in ladder order, then other variants (tilelang last) by name."""
    vs = list(dict.fromkeys(variants))
    rank = {v: i for i, v in enumerate(LADDER)}
    return sorted(vs, key=lambda v: (rank.get(v, len(LADDER) + (v == TILELANG)), v))


# ------------------------------------------------------------------------- recorded baseline


def shape_key(case: Case) -> tuple:
    """The key that matches a case to a recorded baseline row."""
    return (case.B, case.S, case.H, case.G, case.N, case.P, case.R, case.C,
            dtype_name(parse_dtype(case.dtype)))


def load_gpu_baseline(path: str | Path | None = None) -> pd.DataFrame:
    """Read a recorded TileLang baseline (the ``tilelang-h200.json`` format).

    Returns one row per measured shape: ``label`` (the file's case label), B S H G N P R C
    dtype (canonical torch name), ``bwd_bwd_us``, ``bwd_fwd_us``, ``unique_bytes``,
    ``hbm_roofline_us``. Rows recorded with an ``error`` are dropped. ``df.attrs`` keeps the
    file's ``device``, ``software`` and ``upstream`` blocks. Default: the copy shipped as
    package data (``mamba3_perf/data/tilelang-h200.json``).
    """
    origin = str(path) if path is not None else f"mamba3_perf/data/{_BASELINE_FILE}"
    try:
        if path is None:
            text = resources.files("mamba3_perf.data").joinpath(_BASELINE_FILE).read_text()
        else:
            text = Path(path).read_text()
        raw = json.loads(text)
    except (OSError, ValueError) as e:
        raise ParseError(f"{origin}: cannot read baseline: {e}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cases"), list):
        raise ParseError(f"{origin}: expected an object with a 'cases' list")
    rows = []
    for i, rec in enumerate(raw["cases"]):
        if "error" in rec:
            continue
        missing = [k for k in (*SHAPE_KEY, "bwd_bwd_ms") if k not in rec]
        if missing:
            raise ParseError(f"{origin}: case #{i} lacks {missing}")
        try:
            dt = dtype_name(parse_dtype(rec["dtype"]))
        except CaseError as e:
            raise ParseError(f"{origin}: case #{i}: {e}") from None
        rows.append({
            "label": rec.get("case", rec.get("cfg", "")),
            **{k: int(rec[k]) for k in SHAPE_KEY if k != "dtype"},
            "dtype": dt,
            "bwd_bwd_us": float(rec["bwd_bwd_ms"]) * 1e3,
            "bwd_fwd_us": float(rec.get("bwd_fwd_ms", math.nan)) * 1e3,
            "unique_bytes": float(rec.get("bwd_bwd_unique_bytes", math.nan)),
            "hbm_roofline_us": float(rec.get("hbm_roofline_ms", math.nan)) * 1e3,
        })
    cols = ["label", *SHAPE_KEY, "bwd_bwd_us", "bwd_fwd_us", "unique_bytes", "hbm_roofline_us"]
    df = pd.DataFrame(rows, columns=cols)
    df.attrs.update({k: raw[k] for k in ("device", "software", "upstream", "measured_on") if k in raw})
    return df


def baseline_us(case: Case, baseline: pd.DataFrame) -> float:
    """The recorded bwd_bwd time of ``case``'s shape, NaN when the baseline lacks it."""
    key = shape_key(case)
    hit = baseline
    for col, val in zip(SHAPE_KEY, key):
        hit = hit[hit[col] == val]
    return float(hit["bwd_bwd_us"].iloc[0]) if len(hit) else math.nan


def resolve_cases(case_ids: Iterable[str], meta_cases: Iterable[Mapping] = ()) -> dict[str, Case]:
    """Map case ids to Cases: from a run's ``cases`` metadata first, then the named cases.

    Ids known to neither are left out (their rows get no baseline and no limits).
    """
    known: dict[str, Case] = {}
    for d in meta_cases or ():
        try:
            c = Case(**d)
        except (TypeError, CaseError):
            continue
        known[c.id] = c
    out = {}
    for cid in dict.fromkeys(case_ids):
        if cid in known:
            out[cid] = known[cid]
        else:
            try:
                out[cid] = get_case(cid)
            except CaseError:
                continue
    return out


# ---------------------------------------------------------------------------- ladder table

LADDER_COLUMNS = ("case_id", "variant", "status", "reason", "median_us", "p10_us", "p90_us",
                  "stage0_us", "speedup_vs_stage0", "tilelang_us", "tilelang_source",
                  "ratio_vs_tilelang")


def ladder_table(timings: pd.DataFrame, *, cases: Mapping[str, Case] | None = None,
                 baseline: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per case, per variant: status, time, speedup vs stage0, ratio vs TileLang.

    ``cases`` maps case_id -> Case for the recorded-baseline match (see
    :func:`resolve_cases`); without it, or without ``baseline``, only a live ``tilelang``
    row gives the TileLang time.
    """
    t = timings.copy()
    for c in ("reason", "p10_us", "p90_us"):
        if c not in t.columns:
            t[c] = pd.NA if c == "reason" else np.nan
    ok = t["status"] == "ok"
    med = t["median_us"].astype("float64").where(ok)
    t["median_us"] = t["median_us"].astype("float64")
    t["_ok_us"] = med
    s0 = t[t["variant"] == BASELINE_VARIANT].set_index("case_id")["_ok_us"]
    # a live TileLang row counts with its time even when it misses the golden bound: upstream
    # computes in bf16 and is timed for reference (bench.TILELANG_WRONG_REASON)
    tl = t[(t["variant"] == TILELANG) & t["status"].isin(["ok", "wrong"])].set_index("case_id")["median_us"]
    t["stage0_us"] = t["case_id"].map(s0).astype("float64")
    t["speedup_vs_stage0"] = t["stage0_us"] / t["_ok_us"]
    live = t["case_id"].map(tl).astype("float64")
    rec = pd.Series(np.nan, index=t.index)
    if baseline is not None and cases:
        rec = t["case_id"].map(
            {cid: baseline_us(c, baseline) for cid, c in cases.items()}).astype("float64")
    t["tilelang_us"] = live.fillna(rec)
    t["tilelang_source"] = pd.Series(
        np.where(live.notna(), "live", np.where(rec.notna(), "recorded", None)), index=t.index,
        dtype="string")
    t["ratio_vs_tilelang"] = (t["_ok_us"] / t["tilelang_us"]).where(t["variant"] != TILELANG)
    order = {v: i for i, v in enumerate(variant_order(t["variant"]))}
    t["_vo"] = t["variant"].map(order)
    t = t.sort_values(["case_id", "_vo"], kind="stable")
    return t[list(LADDER_COLUMNS)].reset_index(drop=True)


def _geomean(x: pd.Series) -> float:
    x = x.dropna()
    x = x[x > 0]
    return float(np.exp(np.log(x).mean())) if len(x) else math.nan


@dataclass(frozen=True)
class LadderSummary:
    """Geometric means per variant.

    ``per_variant`` columns: variant, parent (the previous ladder step present in the table),
    geomean_speedup_vs_stage0 (over the cases stage0 runs), geomean_step_speedup (vs the
    parent, over every case both ran "ok"), geomean_ratio_vs_tilelang (over every case the
    variant ran "ok" and TileLang has a time), n_cases and missing (cases stage0 ran that this
    variant did not run "ok"), n_tilelang_cases (the cases of the TileLang mean).
    ``stage0_not_runnable`` lists the cases left out of the speedup-vs-stage0 means with
    stage0's reason.
    """

    per_variant: pd.DataFrame
    stage0_not_runnable: tuple[tuple[str, str], ...]


def summarize_ladder(table: pd.DataFrame) -> LadderSummary:
    """Reduce :func:`ladder_table` output to per-variant geometric means."""
    s0 = table[table["variant"] == BASELINE_VARIANT]
    runnable = set(s0.loc[s0["status"] == "ok", "case_id"])
    not_run = tuple((str(r.case_id), "" if pd.isna(r.reason) else str(r.reason))
                    for r in s0[s0["status"] != "ok"].itertuples())
    ok_us = table["median_us"].where(table["status"] == "ok")
    by = table.assign(_ok_us=ok_us).pivot_table(index="case_id", columns="variant",
                                                 values="_ok_us", aggfunc="first", dropna=False)
    rows = []
    present = [v for v in variant_order(table["variant"]) if v in LADDER]
    for v in variant_order(table["variant"]):
        sub = table[(table["variant"] == v) & table["case_id"].isin(runnable)]
        ok_cases = set(sub.loc[sub["status"] == "ok", "case_id"])
        parent = present[present.index(v) - 1] if v in present and present.index(v) > 0 else None
        step = math.nan
        if parent is not None and parent in by.columns and v in by.columns:
            pv = by[[parent, v]].dropna()  # every case both ran "ok", stage0 or not
            step = _geomean(pv[parent] / pv[v])
        ratios = table.loc[table["variant"] == v, "ratio_vs_tilelang"]
        rows.append({
            "variant": v,
            "parent": parent,
            "geomean_speedup_vs_stage0": _geomean(sub["speedup_vs_stage0"]),
            "geomean_step_speedup": step,
            "geomean_ratio_vs_tilelang": _geomean(ratios),
            "n_cases": len(ok_cases),
            "missing": tuple(sorted(runnable - ok_cases)),
            "n_tilelang_cases": int(ratios.notna().sum()),
        })
    cols = ["variant", "parent", "geomean_speedup_vs_stage0", "geomean_step_speedup",
            "geomean_ratio_vs_tilelang", "n_cases", "missing", "n_tilelang_cases"]
    return LadderSummary(per_variant=pd.DataFrame(rows, columns=cols), stage0_not_runnable=not_run)
