"""The optimization record of a run, as markdown.

Sections: what/when/where, baseline and goal, bottleneck found, per-kernel hardware figures
(where the trace has them: occupancy, warp stalls, DRAM bytes), where one kernel's instructions
go (where the run has ncu source pages), per-step gains, speedup per shape, not-runnable list,
gap to GPU TileLang and to the limits. When the run's timing_kind is "interpreter" the first
line says so: such times are Triton-interpreter times on a CPU and say nothing about the device.
"""
from __future__ import annotations

import html
import math

import pandas as pd

from mamba3_perf.analysis.breakdown import WARP_STATE_COLUMNS, dram_floor_us, leading_stall
from mamba3_perf.analysis.ladder import LADDER, TILELANG, LadderSummary, variant_order
from mamba3_perf.analysis.limits import DeviceSpec, device_for
from mamba3_perf.reports import fmt_us

INTERPRETER_WARNING = ("**Timings below are Triton-interpreter timings (CPU), not device timings:"
                       " speedups, ratios and fractions of limits do not describe the GPU or NPU.**")


def _cell(v) -> str:
    """Table-cell text: HTML-escaped, pipes escaped, one line."""
    if v is None or (not isinstance(v, (str, tuple, list)) and pd.isna(v)):
        return "-"
    return html.escape(str(v), quote=False).replace("|", "\\|").replace("\n", " ")


def _x(v, fmt="{:.2f}x") -> str:
    return "-" if v is None or pd.isna(v) else fmt.format(v)


def _md_table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _what_when_where(meta: dict) -> str:
    versions = meta.get("versions") or {}
    clocks = meta.get("clocks") or {}
    rows = [
        ["device", meta.get("device")], ["backend", meta.get("backend")],
        ["timing kind", meta.get("timing_kind")],
        ["timed as", "CUDA-graph replays of one call" if meta.get("cuda_graph") else None],
        ["created", meta.get("created")],
        ["command", meta.get("command")], ["git commit", meta.get("git_commit")],
        ["versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)],
        ["driver", meta.get("driver")],
        ["clocks", ", ".join(f"{k} {v}" for k, v in clocks.items())],
        ["stages", ", ".join(meta.get("stages") or [])],
    ]
    return "## What, when, where\n\n" + _md_table(["", ""], [r for r in rows if r[1]])


def _best_variant(table: pd.DataFrame) -> str | None:
    ladder = [v for v in variant_order(table["variant"]) if v in LADDER]
    ok = table[table["status"] == "ok"]
    ran = [v for v in ladder if v in set(ok["variant"])]
    return ran[-1] if ran else None


def _baseline_and_goal(summary: LadderSummary, best: str | None) -> str:
    pv = summary.per_variant.set_index("variant")
    lines = ["## Baseline and goal", "",
             "Baseline: `stage0`, one Triton program per (b, h) doing the whole chunk loop. "
             "Goal: reach the GPU TileLang kernel's time on the same shapes, then the limits "
             "(HBM roofline, matmul FLOPs, the reverse scan's serial chain)."]
    if best is not None and best in pv.index:
        r = pv.loc[best]
        lines += ["", f"Latest step `{_cell(best)}`: {_x(r['geomean_speedup_vs_stage0'])} vs stage0 "
                  f"(geometric mean over {int(r['n_cases'])} of the cases stage0 runs) and "
                  f"{_x(r['geomean_ratio_vs_tilelang'], '{:.3g}x')} of TileLang's time (over "
                  f"{_cases(r['n_tilelang_cases'])})."]
    return "\n".join(lines)


def _cases(n) -> str:
    n = int(n)
    return f"{n} case" if n == 1 else f"{n} cases"


def _traffic_floor(bd: pd.DataFrame, device: DeviceSpec) -> str:
    """A sentence on the DRAM bytes the kernels of one breakdown moved (ncu), and the time
    those bytes take at ``device``'s HBM bandwidth ('' without measured bytes)."""
    if "dram_bytes" not in bd.columns or bd["dram_bytes"].isna().all():
        return ""
    have = bd[bd["dram_bytes"].notna()]
    moved, time_us = float(have["dram_bytes"].sum()), float(have["total_us"].sum())
    floor_us = dram_floor_us(moved, device.hbm_bytes_per_s)
    return (f" Its kernels with DRAM counts move {moved / 1e9:.3g} GB (ncu): {fmt_us(floor_us)} µs at "
            f"{_cell(device.name)}'s {device.hbm_bytes_per_s / 1e12:.2g} TB/s, the least time this kernel "
            f"design takes however each kernel is tuned; they take {_x(time_us / floor_us)} that "
            f"({fmt_us(time_us)} µs).")


def _bottleneck(breakdown: pd.DataFrame | None, best: str | None, device: DeviceSpec) -> str:
    head = "## Bottleneck found\n\n"
    if breakdown is None or breakdown.empty:
        return head + "No kernel trace in this run: no stage breakdown."
    parts = []
    groups = breakdown.groupby("variant", sort=False) if "variant" in breakdown.columns else [(None, breakdown)]
    for variant, bd in groups:
        if variant is not None and best is not None and variant != best and len(breakdown["variant"].unique()) > 1:
            continue
        top = bd.sort_values("total_us", ascending=False).iloc[0]
        metrics = [c for c in bd.columns
                   if c not in ("variant", "stage_tag", "total_us", "share", "count", *WARP_STATE_COLUMNS)
                   and pd.api.types.is_numeric_dtype(bd[c]) and not pd.isna(top[c])]
        util = ", ".join(f"{c} {top[c]:.3g}" for c in metrics) or "no utilization metrics in the trace"
        lead = leading_stall(top)
        if lead is not None:
            util += (f"; its warps stall most on {lead[0]} ({lead[1]:.2f} of the "
                     f"{top['cycles_per_issue']:.2f} cycles between two issues of a warp)")
        who = f"`{_cell(variant)}`: " if variant is not None else ""
        share = f"{100 * top['share']:.0f}%" if "share" in bd.columns and not pd.isna(top["share"]) else "?"
        parts.append(f"{who}stage tag **{_cell(top['stage_tag'])}** dominates with {share} of the traced "
                     f"time ({fmt_us(top['total_us'])} µs over {_cell(top.get('count'))} launches); {_cell(util)}."
                     + _traffic_floor(bd, device))
    return head + "\n".join(parts)


def _per_kernel(kernels: pd.DataFrame | None, best: str | None, device: DeviceSpec,
                cases: list[dict] | None = None) -> str:
    """Per kernel of the fastest step, and of the live TileLang row where the run has its kernel:
    device time, registers, shared memory, the blocks one SM holds and the resource that limits
    them, warps resident in theory and as measured, tensor pipe and DRAM throughput, the leading
    warp stall, DRAM time against its floor, the grid's waves over the device's SMs, DRAM bytes
    and instructions per launch ('' where the trace gives no registers: Ascend, the
    interpreter). ``cases``: the run's cases (run.json's), for the per-call line's SM time per
    (b, h, chunk) where the kernels are of one of them."""
    from mamba3_perf.analysis.breakdown import kernel_stalls, kernel_traffic
    from mamba3_perf.analysis.occupancy import kernel_occupancy
    from mamba3_perf.reports.console import next_block_cell, short_kernel_name

    if kernels is None or kernels.empty:
        return ""
    shown = [best]
    if best is not None and "variant" in kernels.columns and (kernels["variant"] == best).any():
        if best != TILELANG and (kernels["variant"] == TILELANG).any():
            shown.append(TILELANG)
        kernels = kernels[kernels["variant"].isin(shown)]
    occ = kernel_occupancy(kernels, device)
    if occ.empty:
        return ""
    if "variant" in occ.columns:  # the step's kernels first, then TileLang's
        occ = occ.sort_values("variant", key=lambda v: v.map({b: i for i, b in enumerate(shown)}), kind="stable")
    stalls = kernel_stalls(kernels).drop_duplicates("kernel_name").set_index("kernel_name")
    traffic = kernel_traffic(kernels, device.hbm_bytes_per_s).drop_duplicates("kernel_name").set_index("kernel_name")
    measured = [c for c in ("tensor_pipe_pct", "dram_throughput_pct", "dram_bytes", "instructions")
                if c in kernels.columns]
    means = kernels.groupby("kernel_name")[measured].mean()  # NaN (no ncu rows) stays NaN

    def mean(k, c):
        return means.at[k, c] if c in measured and k in means.index else None

    def scaled(v, unit, fmt):
        return "-" if v is None or pd.isna(v) else fmt.format(v / unit)

    rows = []
    for r in occ.to_dict("records"):
        k = r["kernel_name"]
        lead = leading_stall(stalls.loc[k]) if k in stalls.index else None
        floor = traffic["vs_floor"].get(k)
        name = short_kernel_name(k) + (" (TileLang)" if r.get("variant") == TILELANG else "")
        rows.append([name, fmt_us(r["total_us"] / r["launches"]), f"{r['launches']:.0f}",
                     f"{r['registers_per_thread']:.0f}",
                     f"{r['smem_bytes'] / 1024:.0f}", f"{r['blocks_per_sm']:.0f} ({r['limiter']})",
                     next_block_cell(r),
                     f"{r['theoretical_pct']:.1f} %", _pct_cell(r["warps_active_pct"]),
                     *(_pct_cell(mean(k, c)) for c in ("tensor_pipe_pct", "dram_throughput_pct")),
                     "-" if lead is None else f"{lead[0]} {100 * lead[2]:.0f} %", _x(floor),
                     scaled(r["waves"], 1, "{:.2f}"), scaled(mean(k, "dram_bytes"), 1e9, "{:.2f}"),
                     scaled(mean(k, "instructions"), 1e6, "{:.0f}")])
    return (f"## Per kernel (`{_cell(best)}`, {_cell(device.name)})\n\nDevice µs per launch (of ncu's "
            "replay where the run holds its rows, else of the traced launches: `perf profile "
            "--hw-metrics` sets ncu's metrics on those) and the launches traced; registers per "
            "thread; shared memory per block (KiB); blocks per SM and the resource that limits "
            "them (analysis.occupancy); the registers per thread / shared memory (KiB) one more "
            "block per SM would need; warps resident, in theory and as measured; tensor pipe and "
            "DRAM throughput (% of peak); the leading warp stall and its share of the cycles "
            "between issues; time against the DRAM floor of its bytes; the grid's waves (blocks / "
            "(SMs x blocks per SM): under 1, SMs left idle); DRAM GB and warp instructions "
            "(millions) per launch (ncu columns are '-' without an ncu replay). The live TileLang "
            "kernel, where the run has it, follows the step's.\n\n"
            + _md_table(["kernel", "µs", "launches", "regs", "smem KiB", "blocks/SM", "+1 block at", "warps (theory)",
                         "warps (measured)", "tensor", "DRAM", "leading stall", "vs DRAM floor", "waves",
                         "DRAM GB", "instr. M"], rows)
            + _per_call(occ, means, device, _chunk_units(kernels, cases)))


def _chunk_units(kernels: pd.DataFrame, cases: list[dict] | None) -> int | None:
    """B * H * nchunks of the one case the kernels ran on (run.json's ``cases``), else None."""
    ids = kernels["case_id"].dropna().unique() if "case_id" in kernels.columns else ()
    case = next((c for c in cases or () if len(ids) == 1 and c.get("id") == ids[0]), None)
    if case is None or not all(k in case for k in ("B", "H", "S", "C")):
        return None
    return int(case["B"]) * int(case["H"]) * math.ceil(int(case["S"]) / int(case["C"]))


def _per_call(occ: pd.DataFrame, means: pd.DataFrame, device: DeviceSpec, units: int | None = None) -> str:
    """A sentence per variant of the per-kernel table: its kernels' device time, DRAM bytes and
    instructions per call (a call launches each kernel at least once: the fewest launches of
    any of its kernels are the calls), where no kernel's grid fills one wave how many of the
    device's SMs its widest grid keeps busy, and with ``units`` (B * H * nchunks) the SM time a
    call takes per (b, h, chunk): each kernel's time times the SMs its grid keeps busy
    (analysis.occupancy's ``sms_busy``), summed, over the units, which compares designs whose
    grids leave different numbers of SMs idle ('' without a variant column)."""
    if "variant" not in occ.columns or occ.empty:
        return ""
    parts = []
    for variant, g in occ.groupby("variant", sort=False):
        calls = g["launches"].min()
        per_launch = means.reindex(g["kernel_name"])
        text = f"`{_cell(variant)}` {fmt_us(g['total_us'].sum() / calls)} µs"
        for col, unit, fmt in (("dram_bytes", 1e9, "{:.2f} GB"), ("instructions", 1e6, "{:.0f} M instructions")):
            if col in per_launch.columns and per_launch[col].notna().all():
                text += ", " + fmt.format((per_launch[col].to_numpy() * g["launches"].to_numpy()).sum() / calls / unit)
        if g["waves"].notna().all() and g["waves"].max() < 1:
            widest = g.loc[g["waves"].idxmax()]
            text += f", its grid on {widest['sms_busy']:.0f} of the {device.sm_count} SMs ({widest['waves']:.2f} waves)"
        if units and g["sms_busy"].notna().all():
            text += f", {(g['total_us'] * g['sms_busy']).sum() / calls / units:.1f} SM·µs per (b, h, chunk)"
        parts.append(text)
    return "\n\nPer call, summed over the kernels above: " + "; ".join(parts) + "."


SOURCE_REGION_MIN_PCT = 1.0  # loop bodies under this share of the stall samples are left out
SOURCE_OPCODES = 8


def _source_pages(pages: dict[str, pd.DataFrame] | None, kernel: str | None) -> str:
    """Per variant, its ncu source page of ``kernel`` (mamba3_perf.analysis.sass) summed per loop
    body (those with at least SOURCE_REGION_MIN_PCT % of the samples) and its leading opcodes."""
    from mamba3_perf.analysis.sass import measured_mix, measured_regions

    if not pages:
        return ""
    blocks = [f"## Where {_cell(kernel or 'the kernel')}'s instructions go (Nsight Compute source page)",
              "Shares of the kernel's executed warp instructions, warp stall samples and shared-memory "
              "wavefronts beyond the ideal (bank conflicts), per loop body and per opcode; leading stall "
              "reasons in % of all samples (`perf sass` prints a page in full)."]
    for variant, df in pages.items():
        reg = measured_regions(df)
        reg = reg[(reg["region"] == "kernel") | (reg["samples_%"] >= SOURCE_REGION_MIN_PCT)]
        mix = measured_mix(df).head(SOURCE_OPCODES)
        blocks.append(f"### {_cell(variant)}")
        blocks.append(_md_table(["region", "SASS", "executed", "stall samples", "excess smem wavefronts",
                                 "leading stalls"],
                                [[r["region"], r["instructions"], _pct_cell(r["executed_%"]), _pct_cell(r["samples_%"]),
                                  _pct_cell(r["smem_excess_%"]), r["top_stalls"]] for r in reg.to_dict("records")]))
        blocks.append(_md_table(["opcode", "kind", "SASS", "executed", "stall samples", "excess smem wavefronts"],
                                [[r["op"], r["kind"], r["instructions"], _pct_cell(r["executed_%"]),
                                  _pct_cell(r["samples_%"]), _pct_cell(r["smem_excess_wavefronts_%"])]
                                 for r in mix.to_dict("records")]))
    return "\n\n".join(blocks)


def _pct_cell(v) -> str:
    return "-" if v is None or pd.isna(v) else f"{v:.1f} %"


def _step_gains(summary: LadderSummary) -> str:
    rows = [[r["variant"], r["parent"] or "-", _x(r["geomean_step_speedup"]),
             _x(r["geomean_speedup_vs_stage0"]), _x(r["geomean_ratio_vs_tilelang"], "{:.3g}x"), r["n_cases"],
             r["n_tilelang_cases"], ", ".join(r["missing"]) or "-"]
            for r in summary.per_variant.to_dict("records")]
    return ("## Per-step gains\n\nGeometric means: vs stage0 over the cases stage0 runs, step gain "
            "over the cases the step and its parent both ran, vs TileLang (time / TileLang time) "
            "over the cases the step ran; cases = those of stage0's it ran, TileLang cases = those "
            "of the TileLang mean.\n\n"
            + _md_table(["step", "parent", "step gain", "vs stage0", "vs TileLang", "cases",
                         "TileLang cases", "not ok on"], rows))


def _per_shape(table: pd.DataFrame) -> str:
    variants = [v for v in variant_order(table["variant"]) if v in LADDER]
    piv = table.pivot_table(index="case_id", columns="variant", values="speedup_vs_stage0",
                            aggfunc="first", dropna=False)
    rows = [[cid] + [_x(piv.at[cid, v]) if v in piv.columns else "-" for v in variants]
            for cid in piv.index]
    return "## Speedup per shape (vs stage0)\n\n" + _md_table(["case", *variants], rows)


def _not_runnable(table: pd.DataFrame) -> str:
    bad = table[table["status"] != "ok"]
    if bad.empty:
        return "## Not runnable\n\nEvery variant ran and passed on every case."
    rows = [[r["variant"], r["case_id"], r["status"], r["reason"]] for r in bad.to_dict("records")]
    return "## Not runnable or wrong\n\n" + _md_table(["variant", "case", "status", "reason"], rows)


def _gaps(table: pd.DataFrame, best: str | None, *, device_times: bool = True) -> str:
    head = "## Gap to GPU TileLang and to the limits\n\n"
    if best is None:
        return head + "No ladder step ran ok."
    sub = table[(table["variant"] == best) & (table["status"] == "ok")]
    has_lim = "lower_bound_us" in sub.columns
    rows = []
    for r in sub.to_dict("records"):
        src = r.get("tilelang_source")
        rows.append([r["case_id"], fmt_us(r["median_us"]), fmt_us(r.get("tilelang_us")),
                     "-" if pd.isna(src) else src, _x(r.get("ratio_vs_tilelang"), "{:.3g}x"),
                     fmt_us(r.get("hbm_roofline_us")) if has_lim else "-",
                     fmt_us(r.get("serial_bound_us")) if has_lim else "-",
                     r.get("bound_by") if has_lim else "-",
                     _x(r["median_us"] / r["lower_bound_us"])
                     if device_times and has_lim and r.get("lower_bound_us") else "-"])
    if "tilelang_us" not in sub or sub["tilelang_us"].isna().all():
        head += ("No TileLang time: the run has no live `tilelang` row, and a recorded baseline "
                 "counts only on the device it was recorded on (the packaged one: NVIDIA H200).\n\n")
    return (head + f"Step `{_cell(best)}`; times in µs; last column is time / max(lower bounds).\n\n"
            + _md_table(["case", "time", "TileLang", "source", "vs TileLang", "HBM roofline",
                         "serial bound", "bound by", "vs bound"], rows))


def optimization_record(meta: dict, table: pd.DataFrame, summary: LadderSummary, *,
                        breakdown: pd.DataFrame | None = None, kernels: pd.DataFrame | None = None,
                        source_pages: dict[str, pd.DataFrame] | None = None, title: str | None = None) -> str:
    """The record as markdown.

    ``meta`` is the run's run.json; ``table`` is ladder_table output (with_limits columns
    optional); ``summary`` is summarize_ladder(table); ``breakdown`` has stage_tag, total_us,
    share, count, metric means, optionally per ``variant``; ``kernels`` the run's whole-kernel
    events (KERNEL_EVENTS), for the per-kernel section; ``source_pages`` variant -> ncu source
    page (mamba3_perf.analysis.sass.read_source_page) of the kernel run.json names
    (``source_page_kernel``).
    """
    best = _best_variant(table)
    name = title or f"bwd_bwd optimization record: {meta.get('device') or 'unknown device'}"
    blocks = []
    if meta.get("timing_kind") == "interpreter":
        blocks.append(INTERPRETER_WARNING)
    blocks += [f"# {_cell(name)}", _what_when_where(meta), _baseline_and_goal(summary, best),
               _bottleneck(breakdown, best, device_for(meta.get("device")))]
    per_kernel = _per_kernel(kernels, best, device_for(meta.get("device")), meta.get("cases"))
    if per_kernel:
        blocks.append(per_kernel)
    pages = _source_pages(source_pages, meta.get("source_page_kernel"))
    if pages:
        blocks.append(pages)
    blocks += [_step_gains(summary), _per_shape(table), _not_runnable(table),
               _gaps(table, best, device_times=meta.get("timing_kind") != "interpreter")]
    if summary.stage0_not_runnable:
        blocks.append("Cases left out of the means because stage0 cannot run them: "
                      + ", ".join(f"{_cell(c)} ({_cell(w)})" for c, w in summary.stage0_not_runnable)
                      + ".")
    return "\n\n".join(blocks) + "\n"
