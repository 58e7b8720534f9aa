"""Nsight Compute's source page of one kernel of a stage: per SASS instruction, how often it ran
and where its warps stalled (ncu's SourceCounters and WarpStateStats sections), the view that
says which instructions of a kernel cost its time.

    python benchmarks/ncu_source.py --case N128_P64_R4_C16 --stage stage26_widep \\
        --kernel bwd_bwd_aux_gluon_kernel --out /tmp/src

writes OUT/KERNEL.ncu-rep (ncu's report of the kernel's first launch) and OUT/KERNEL-sass.csv (the
report's source page as CSV, one row per SASS instruction), and prints the instructions with the
most stall samples. Needs ncu on PATH and a CUDA device (the stage's own process runs under it,
mamba3_perf.profile_target).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys

SECTIONS = ("SourceCounters", "WarpStateStats", "LaunchStats", "Occupancy")


def profile_command(case, stage: str, kernel: str, report: str) -> list[str]:
    """ncu over the first launch of ``kernel`` in one run of ``stage`` on ``case``, to ``report``."""
    sections = [a for s in SECTIONS for a in ("--section", s)]
    return ["ncu", *sections, "--clock-control", "none", "--kernel-name", kernel, "--launch-count", "1",
            "--force-overwrite", "--export", report,
            sys.executable, "-m", "mamba3_perf.profile_target", "--case-json", json.dumps(case.to_dict()),
            "--variant", stage]


def source_command(report: str) -> list[str]:
    """The report's source page, SASS, as CSV on stdout."""
    return ["ncu", "--import", report, "--page", "source", "--csv", "--print-source", "sass"]


def hottest(csv_text: str, rows: int):
    """The ``rows`` instructions of the source page with the most stall samples (a DataFrame),
    or None where the page has no stall-sample column."""
    import pandas as pd

    df = pd.read_csv(io.StringIO(csv_text))
    samples = [c for c in df.columns if "Sampling" in c and "All" in c]
    if not samples:
        return None
    col = samples[0]
    df[col] = pd.to_numeric(df[col], errors="coerce").fillna(0)
    df["share_%"] = 100 * df[col] / max(df[col].sum(), 1)
    return df.sort_values(col, ascending=False).head(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True, help="a case id (perf cases lists them)")
    ap.add_argument("--stage", required=True)
    ap.add_argument("--kernel", required=True, help="the kernel's name (ncu --kernel-name)")
    ap.add_argument("--out", required=True, help="directory for the report and the CSV")
    ap.add_argument("--rows", type=int, default=40)
    a = ap.parse_args(argv)

    from mamba3_perf.bench import select_cases
    from mamba3_perf.runs import write_text_atomic

    if shutil.which("ncu") is None:
        raise SystemExit("ncu is not on PATH")
    (case,) = select_cases(a.case)
    os.makedirs(a.out, exist_ok=True)
    report = os.path.join(a.out, f"{a.kernel}.ncu-rep")
    res = subprocess.run(profile_command(case, a.stage, a.kernel, report), capture_output=True, text=True)
    if res.returncode != 0 or not os.path.exists(report):
        raise SystemExit(f"ncu failed (exit {res.returncode}): {(res.stderr or res.stdout).strip()[-600:]}")
    page = subprocess.run(source_command(report), capture_output=True, text=True)
    if page.returncode != 0:
        raise SystemExit(f"ncu --page source failed (exit {page.returncode}): {page.stderr.strip()[-600:]}")
    write_text_atomic(os.path.join(a.out, f"{a.kernel}-sass.csv"), page.stdout)
    top = hottest(page.stdout, a.rows)
    print(top.to_string() if top is not None else page.stdout[:2000])


if __name__ == "__main__":
    main()
