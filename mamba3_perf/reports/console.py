"""Rich tables rendered to plain text: run summary, ladder means, stage breakdown, comparison,
an ncu source page by region and opcode.

Cells are built as :class:`rich.text.Text`, so names from tables are never read as markup.
"""
from __future__ import annotations

import io
import math

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mamba3_perf.analysis.breakdown import STALL_COLUMNS, WARP_STATE_COLUMNS, leading_stall
from mamba3_perf.analysis.ladder import LadderSummary
from mamba3_perf.analysis.limits import DeviceSpec
from mamba3_perf.reports import fmt_us


def render(table: Table, *, width: int = 160) -> str:
    """A rich table as plain text (no colour codes)."""
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, force_terminal=False).print(table)
    return buf.getvalue()


def _num(v, fmt: str = "{:.4g}", suffix: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "-"
    return fmt.format(v) + suffix


def _text(v) -> str:
    """A text cell: "-" where missing."""
    return "-" if pd.isna(v) else str(v)


def _pct(v) -> str:
    return _num(v if v is None or pd.isna(v) else 100.0 * v, "{:.1f}", "%")


def _table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    t = Table(title=Text(title), show_lines=False)
    for c in columns:
        t.add_column(Text(c), overflow="fold")
    for r in rows:
        t.add_row(*(Text("" if v is None else str(v)) for v in r))
    return t


def run_title(name: str, backend, cuda_graph: bool = False) -> str:
    """The title of a timed run: its name, backend and how it was timed."""
    how = backend.timing_kind + (", CUDA-graph replays" if cuda_graph else "")
    return f"Run {name} ({backend.name}, {how})"


def run_summary(table: pd.DataFrame, *, title: str = "Run summary", width: int = 160) -> str:
    """Per case and variant: status, median, spread, speedup, TileLang ratio, fractions of limits.

    ``table``: :func:`~mamba3_perf.analysis.ladder.ladder_table` output, optionally with the
    columns of :func:`~mamba3_perf.analysis.limits.with_limits`.
    """
    cols = ["case", "variant", "status", "median µs", "p10-p90 µs", "vs stage0", "vs TileLang",
            "HBM roofline", "serial bound", "reason"]
    rows = []
    for r in table.to_dict("records"):
        src = r.get("tilelang_source")
        ratio = _num(r.get("ratio_vs_tilelang"), "{:.3g}", "x")
        if ratio != "-" and src == "recorded":
            ratio += " (rec)"
        spread = "-" if pd.isna(r.get("p10_us")) else f"{fmt_us(r['p10_us'])}-{fmt_us(r['p90_us'])}"
        rows.append([r["case_id"], r["variant"], r["status"], fmt_us(r.get("median_us")), spread,
                     _num(r.get("speedup_vs_stage0"), "{:.2f}", "x"), ratio,
                     _pct(r.get("frac_hbm_roofline")), _pct(r.get("frac_serial_bound")),
                     "" if r["status"] == "ok" or pd.isna(r.get("reason")) else r["reason"]])
    return render(_table(title, cols, rows), width=width)


def ladder_means(summary: LadderSummary, *, width: int = 160) -> str:
    """Geometric means per variant, then the cases stage0 cannot run."""
    cols = ["variant", "vs stage0 (geomean)", "step vs parent", "vs TileLang (geomean)", "cases",
            "TileLang cases", "missing"]
    rows = [[r["variant"], _num(r["geomean_speedup_vs_stage0"], "{:.2f}", "x"),
             _num(r["geomean_step_speedup"], "{:.2f}", "x"),
             _num(r["geomean_ratio_vs_tilelang"], "{:.3g}", "x"), r["n_cases"], r["n_tilelang_cases"],
             ", ".join(r["missing"])] for r in summary.per_variant.to_dict("records")]
    out = render(_table("Ladder (vs stage0 over the cases stage0 runs; steps and TileLang over all)", cols, rows), width=width)
    if summary.stage0_not_runnable:
        nr = [[c, why] for c, why in summary.stage0_not_runnable]
        out += render(_table("Cases stage0 cannot run (left out of the means)", ["case", "reason"], nr),
                      width=width)
    return out


def breakdown_table(breakdown: pd.DataFrame, *, title: str = "Stage breakdown",
                    width: int = 160) -> str:
    """A breakdown frame (stage_tag, total_us, share, count, metric means) as a table.

    Metric columns that are empty throughout are left out, and so are the warp-state columns
    (:func:`stall_table` shows them per kernel); a ``variant`` column is kept first.
    """
    lead = [c for c in ("variant", "stage_tag", "total_us", "share", "count") if c in breakdown.columns]
    rest = [c for c in breakdown.columns
            if c not in lead and c not in WARP_STATE_COLUMNS and breakdown[c].notna().any()]
    rows = []
    for r in breakdown.to_dict("records"):
        row = []
        for c in lead + rest:
            v = r[c]
            row.append(_pct(v) if c == "share" else fmt_us(v) if c == "total_us" else
                       _num(v) if isinstance(v, float) else
                       _text(v))
        rows.append(row)
    return render(_table(title, lead + rest, rows), width=width)


# short headers for the stall reasons (ncu's names, abbreviated)
_STALL_SHORT = {"long_scoreboard": "long_sb", "short_scoreboard": "short_sb", "mio_throttle": "mio",
                "math_pipe_throttle": "math"}


def stall_table(stalls: pd.DataFrame, *, title: str = "Warp stalls per kernel",
                width: int = 160) -> str:
    """A :func:`mamba3_perf.analysis.breakdown.kernel_stalls` frame as a table: per kernel its
    device time, the cycles between two instructions a warp issues (cyc/issue), how many of
    them each stall reason takes, and the leading reason with its share ('' for an empty
    frame)."""
    if stalls.empty:
        return ""
    keys = [c for c in ("variant", "stage_tag", "kernel_name") if c in stalls.columns]
    reasons = [c for c in STALL_COLUMNS if stalls[c].notna().any()]
    short = [_STALL_SHORT.get(c.removeprefix("stall_"), c.removeprefix("stall_")) for c in reasons]
    rows = []
    for r in stalls.to_dict("records"):
        lead = leading_stall(r)
        rows.append([_text(r[k]) for k in keys]
                    + [fmt_us(r["total_us"]), _num(r["cycles_per_issue"], "{:.2f}")]
                    + [_num(r[c], "{:.2f}") for c in reasons]
                    + ["-" if lead is None else f"{_STALL_SHORT.get(lead[0], lead[0])} {_pct(lead[2])}"])
    return render(_table(title, keys + ["total_us", "cyc/issue"] + short + ["leading"], rows), width=width)


def traffic_table(traffic: pd.DataFrame, *, device: DeviceSpec, title: str = "DRAM traffic per kernel",
                  width: int = 160) -> str:
    """A :func:`mamba3_perf.analysis.breakdown.kernel_traffic` frame (made with ``device``'s HBM
    bandwidth) as a table: per kernel its device time, DRAM bytes, the time those bytes take at
    that bandwidth and the ratio, then a row for all the kernels together ('' for an empty
    frame)."""
    if traffic.empty:
        return ""
    keys = [c for c in ("variant", "stage_tag", "kernel_name") if c in traffic.columns]

    def cells(r):
        return [fmt_us(r["total_us"]), _num(r["dram_bytes"] / 1e9, "{:.3f}"), fmt_us(r["floor_us"]),
                _num(r["vs_floor"], "{:.2f}", "x")]

    rows = [[_text(r[k]) for k in keys] + cells(r) for r in traffic.to_dict("records")]
    total, floor = traffic["total_us"].sum(), traffic["floor_us"].sum()
    rows.append(["all kernels"] + [""] * (len(keys) - 1)
                + cells({"total_us": total, "dram_bytes": traffic["dram_bytes"].sum(), "floor_us": floor,
                         "vs_floor": total / floor if floor > 0 else float("nan")}))
    head = f"{title} (floor: the bytes at {device.name}'s {device.hbm_bytes_per_s / 1e12:.2g} TB/s)"
    return render(_table(head, keys + ["total_us", "DRAM GB", "floor_us", "vs floor"], rows), width=width)


def short_kernel_name(name: str, limit: int = 60) -> str:
    """``name`` cut to ``limit`` characters (a Kineto trace names library kernels by their whole
    C++ signature, hundreds of characters)."""
    return name if len(name) <= limit else name[:limit - 3] + "..."


def occupancy_table(occ: pd.DataFrame, *, device: DeviceSpec, title: str = "Occupancy per kernel",
                    width: int = 160) -> str:
    """A :func:`mamba3_perf.analysis.occupancy.kernel_occupancy` frame as a table: per kernel its
    device time (all launches) and launches, registers per thread, shared memory per block,
    threads per block, the blocks one SM holds and the resource that limits them, the warps
    resident in theory and (ncu) as measured, the waves of its grid, and the registers per thread
    and shared memory per block one more block per SM would need ('' for an empty frame)."""
    if occ.empty:
        return ""
    keys = [c for c in ("variant", "stage_tag", "kernel_name") if c in occ.columns]

    def key_cell(r, k):
        v = _text(r[k])
        return short_kernel_name(v) if k == "kernel_name" else v

    rows = [[key_cell(r, k) for k in keys]
            + [fmt_us(r["total_us"]), _num(r["launches"], "{:.0f}"), _num(r["registers_per_thread"], "{:.0f}"),
               _num(r["smem_bytes"] / 1024, "{:.1f}"), _num(r["threads"], "{:.0f}"),
               _num(r["blocks_per_sm"], "{:.0f}"), _text(r["limiter"]),
               _num(r["theoretical_pct"], "{:.1f}", "%"), _num(r["warps_active_pct"], "{:.1f}", "%"),
               _num(r["waves"], "{:.2f}"), next_block_cell(r)]
            for r in occ.to_dict("records")]
    head = f"{title} ({device.name}: {device.max_warps_per_sm} warps, {device.registers_per_sm // 1024}K registers, " \
           f"{device.smem_per_sm_bytes // 1024} KiB shared memory per SM)"
    cols = keys + ["total_us", "launches", "regs", "smem KiB", "threads", "blocks/SM", "limiter", "warps (theory)",
                   "warps (measured)", "waves", "+1 block: regs / KiB"]
    return render(_table(head, cols, rows), width=width)


def next_block_cell(r: dict) -> str:
    """A kernel_occupancy row's ``next_registers`` / ``next_smem_bytes`` as "168 / 75.0"
    (registers per thread / KiB), "-" where one more block per SM cannot be had."""
    regs, smem = r.get("next_registers"), r.get("next_smem_bytes")
    if regs is None or smem is None or pd.isna(regs) or pd.isna(smem):
        return "-"
    return f"{regs:.0f} / {smem / 1024:.1f}"


def compare_table(cmp: pd.DataFrame, *, title: str = "Run comparison (b vs a)",
                  width: int = 160) -> str:
    """:func:`~mamba3_perf.analysis.compare.compare_runs` output as a table."""
    cols = ["case", "variant", "status a", "status b", "median a µs", "median b µs", "delta",
            "spread a", "spread b", "verdict"]
    rows = [[r["case_id"], r["variant"], _text(r["status_a"]), _text(r["status_b"]), fmt_us(r["median_a_us"]),
             fmt_us(r["median_b_us"]), _num(r["delta_pct"], "{:+.1f}", "%"), fmt_us(r["spread_a_us"]),
             fmt_us(r["spread_b_us"]), r["verdict"]] for r in cmp.to_dict("records")]
    return render(_table(title, cols, rows), width=width)


def source_page_tables(page: pd.DataFrame, *, rows: int, title: str, width: int = 160) -> str:
    """An ncu source page (mamba3_perf.analysis.sass.read_source_page) as three tables: per loop
    body (:func:`~mamba3_perf.analysis.sass.measured_regions`), its ``rows`` leading opcodes
    (:func:`~mamba3_perf.analysis.sass.measured_mix`) and its ``rows`` instructions with the
    most stall samples."""
    from mamba3_perf.analysis.sass import measured_mix, measured_regions

    reg = [[r["region"], _num(r["instructions"], "{:.0f}"), _num(r["executed_%"], "{:.1f}", "%"),
            _num(r["samples_%"], "{:.1f}", "%"), _num(r["smem_excess_%"], "{:.1f}", "%"), _num(r["mma"], "{:.0f}"),
            _text(r["top_stalls"])] for r in measured_regions(page).to_dict("records")]
    ops = [[r["op"], r["kind"], _num(r["instructions"], "{:.0f}"), _num(r["executed_%"], "{:.1f}", "%"),
            _num(r["samples_%"], "{:.1f}", "%"), _num(r["smem_excess_wavefronts_%"], "{:.1f}", "%")]
           for r in measured_mix(page).head(rows).to_dict("records")]
    total = max(float(page["samples"].sum()), 1.0)
    top = [[f"{r['addr']:#07x}", r["opcode"], _num(100 * r["samples"] / total, "{:.1f}", "%"),
            _num(r["executed"], "{:.0f}")] for r in page.nlargest(rows, "samples").to_dict("records")]
    return "".join((
        render(_table(f"{title}: by region (shares of the kernel's)", ["region", "SASS", "executed", "stall samples",
                                                                       "excess smem wavefronts", "mma", "leading stalls"],
                      reg), width=width),
        render(_table(f"{title}: by opcode", ["opcode", "kind", "SASS", "executed", "stall samples",
                                              "excess smem wavefronts"], ops), width=width),
        render(_table(f"{title}: instructions with the most stall samples", ["addr", "opcode", "stall samples",
                                                                              "executed"], top), width=width),
    ))


def static_listing_tables(text: str, *, title: str, width: int = 160) -> str:
    """A kernel's ``nvdisasm -c`` listing as tables, without a GPU: its instruction mix whole and
    per loop body (:func:`~mamba3_perf.analysis.sass.instruction_mix`), each wgmma wait with the
    work the warp runs under its wgmma (:func:`~mamba3_perf.analysis.sass.mma_waits`), and every
    write of a register-A wgmma's operand before its wait
    (:func:`~mamba3_perf.analysis.sass.mma_register_hazards`; "none" where there are wgmma and no
    such write)."""
    from mamba3_perf.analysis.sass import KIND_ORDER, instruction_mix, mma_register_hazards, mma_waits, parse_sass

    listing = parse_sass(text)
    mix = instruction_mix(listing)
    out = [render(_table(f"{title}: instructions by kind", ["region", "SASS", *KIND_ORDER],
                         [[r["region"], str(r["instructions"]), *(str(r[k]) for k in KIND_ORDER)]
                          for r in mix.to_dict("records")]), width=width)]
    waits = mma_waits(listing)
    if len(waits):
        out.append(render(_table(f"{title}: wgmma waits", ["addr", "loop", "wgmma issued", "instructions under them"],
                                 [[f"{r['addr']:#06x}", r["loop"], str(r["issued"]), str(r["overlap"])]
                                  for r in waits.to_dict("records")]), width=width))
        hazards = mma_register_hazards(listing)
        out.append(render(_table(f"{title}: wgmma register operands written before their wait (undefined)",
                                 ["wgmma", "A registers", "addr", "opcode", "register"],
                                 [[f"{r['mma_addr']:#06x}", r["a_regs"], f"{r['addr']:#06x}", r["opcode"], r["register"]]
                                  for r in hazards.to_dict("records")]), width=width)
                   if len(hazards) else f"{title}: wgmma register operands: none written before their wait\n")
    return "".join(out)

