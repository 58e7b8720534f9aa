"""Which tensor-core schemes each bwd_bwd product can take and keep every gradient within the
golden criterion (mamba3_perf.analysis.precision), on the CPU: no kernel runs, no timing.

Per case (the official N, P, R, C at S = 2048 by default, on B x H = 1 x 4 (b, h) pairs, bf16
inputs, bf16 cached states as the benchmarks run them): the fp32 reference with every product at
one scheme (all-bf16, all-TF32, ..., all-bf16x3), each product's cheapest scheme with the others
fp32, and the joint plan the search settles on (analysis.precision.search); and per case what one
chunk's products cost on one SM's tensor cores at each plan (analysis.precision.chunk_tensor_us).

    python benchmarks/precision_plan.py --json records/precision-plan-COMMIT.json
    python benchmarks/precision_plan.py --cases small-N16_P64_R4_C8 --batch 1 --heads 2

``--fold`` judges instead, per case, every product at each scheme of ``--fold-schemes`` in the
reference's formulation and in stage45_diagfold's (the qk_dot diagonal terms folded into the
weighted scores, DFACTOR corrected: reference.bwd_bwd_ref's ``fold_diag``), side by side:

    python benchmarks/precision_plan.py --fold --json records/precision-fold-COMMIT.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import replace

import torch

from mamba3_perf.analysis import limits, precision
from mamba3_perf.bench import default_states_dtype, select_cases
from mamba3_perf.kernels.inputs import make_inputs
from mamba3_perf.kernels.reference import PRODUCTS
from mamba3_perf.runs import worktree_tree, write_text_atomic

UNIFORM = ("bf16", "tf32", "bf16x3", "tf32x3")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="official", help="case set(s) and/or case ids (perf bench's --cases)")
    ap.add_argument("--batch", type=int, default=1, help="B of every case (the (b, h) pairs are independent)")
    ap.add_argument("--heads", type=int, default=4, help="H of every case (G = 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the record here (atomically)")
    ap.add_argument("--fold", action="store_true",
                    help="judge stage45's folded diagonal terms against the reference's (no search)")
    ap.add_argument("--fold-schemes", default="bf16x3,tf32x3", help="with --fold: the uniform schemes")
    args = ap.parse_args(argv)

    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    tree = worktree_tree()  # the tree that runs, taken before any edit made while this runs
    cases = [replace(c, B=args.batch, H=args.heads, G=1) for c in select_cases(args.cases)]
    t0 = time.time()
    trials = []
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("golden + fp32 reference", total=len(cases))
        for c in cases:
            x = make_inputs(c, seed=args.seed, states_dtype=default_states_dtype(c))
            trials.append(precision.make_trial(c, x))
            bar.update(task, advance=1, description=f"golden: {c.id}")

    meta = {
        "command": " ".join(["python", "benchmarks/precision_plan.py", *(sys.argv[1:] if argv is None else argv)]),
        "git_tree": tree, "torch": torch.__version__, "python": platform.python_version(),
        "cases": [c.to_dict() for c in cases], "seed": args.seed,
    }
    if args.fold:
        return _fold(args, trials, meta, console, t0)
    uniform = {}
    for scheme in UNIFORM:
        uniform[scheme] = {t.case.id: precision.worst({p: scheme for p in PRODUCTS}, [t]) for t in trials}
        console.print(f"all {scheme}: worst error / bound "
                      f"{max(max(r.values()) for r in uniform[scheme].values()):.3g}")

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("search", total=None)
        found = precision.search(trials, progress=lambda name, scheme, r: bar.update(
            task, advance=1, description=f"{name} at {scheme}: {max(r.values()):.3g}"))
    console.print(f"alone: {found.alone}")
    console.print(f"uniform: {found.uniform}; plan: {found.plan} (lowered {found.lowered}); "
                  f"worst {max(found.plan_ratios.values()):.3g}")

    cost = []
    for t in trials:
        row = {"case_id": t.case.id}
        for dev in (limits.H100, limits.H200):
            key = "h100" if dev is limits.H100 else "h200"
            row[f"plan_{key}_us"] = precision.chunk_tensor_us(t.case, found.plan, dev)
            for scheme in UNIFORM:
                row[f"{scheme}_{key}_us"] = precision.chunk_tensor_us(t.case, scheme, dev)
        row["chunk_mflop"] = sum(limits.chunk_matmul_flops(t.case).values()) / 1e6
        cost.append(row)

    record = {
        "meta": {
            "what": "tensor-core schemes per bwd_bwd product against the golden criterion, emulated "
                    "in the fp32 reference on the CPU (mamba3_perf.analysis.precision); no timing",
            **meta,
            "schemes": {s: {"format": f, "passes": [list(p) for p in ps], "cost_bf16_passes": precision.scheme_cost(s)}
                        for s, (f, ps) in precision.SCHEMES.items()},
            "elapsed_s": round(time.time() - t0, 1),
        },
        "uniform": uniform,
        "alone": found.alone,
        "tried": found.tried,
        "plan": found.plan,
        "plan_ratios": found.plan_ratios,
        "uniform_plan": found.uniform,
        "lowered": found.lowered,
        "chunk_cost": cost,
    }
    _emit(record, args.json, console)
    return 0


def _emit(record: dict, path: str | None, console) -> None:
    text = json.dumps(record, indent=1, sort_keys=False)
    if path:
        write_text_atomic(path, text + "\n")
        console.print(f"wrote {path}")
    else:
        print(text)


def _fold(args, trials, meta: dict, console, t0: float) -> int:
    """--fold: per case and scheme, the worst error / bound per gradient unfolded and folded."""
    from rich.table import Table

    rows = []
    for scheme in args.fold_schemes.split(","):
        plan = {p: scheme for p in PRODUCTS}
        for t in trials:
            plain, folded = (precision.worst(plan, [t], fold_diag=f) for f in (False, True))
            rows.append({"case_id": t.case.id, "scheme": scheme, "reference": plain, "folded": folded})
    table = Table(title="worst error / bound (<= 1 passes): the reference's formulation -> stage45's fold")
    for col in ("case", "scheme", "DQ", "DK", "DFACTOR", "DANGLES", "worst"):
        table.add_column(col)
    for r in rows:
        a, b = r["reference"], r["folded"]
        table.add_row(r["case_id"], r["scheme"], *(f"{a[g]:.3f} -> {b[g]:.3f}" for g in ("DQ", "DK", "DFACTOR", "DANGLES")),
                      f"{max(a.values()):.3f} -> {max(b.values()):.3f}")
    console.print(table)
    record = {"meta": {"what": "stage45_diagfold's folded qk_dot diagonal terms against the reference's formulation, "
                               "every product at one scheme, emulated in the fp32 reference on the CPU "
                               "(mamba3_perf.analysis.precision.worst's fold_diag); no timing",
                       **meta, "elapsed_s": round(time.time() - t0, 1)},
              "rows": rows}
    _emit(record, args.json, console)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
