"""Nsight Compute's source page of one kernel of a stage: per SASS instruction, how often it ran
and where its warps stalled (ncu's SourceCounters and WarpStateStats sections), the view that
says which instructions of a kernel cost its time.

    python benchmarks/ncu_source.py --case N128_P64_R4_C16 --stage stage26_widep \\
        --kernel bwd_bwd_aux_gluon_kernel --out /tmp/src

writes OUT/KERNEL.ncu-rep (ncu's report of the kernel's first launch) and OUT/KERNEL-sass.csv (the
report's source page as CSV, one row per SASS instruction), and prints what `perf sass` prints
of it (mamba3_perf.analysis.sass): per loop body and per opcode, the shares of executed
instructions, stall samples and bank-conflict wavefronts, and the instructions with the most
stall samples. Needs ncu on PATH and a CUDA device (the stage's own process runs under it,
mamba3_perf.profile_target). `perf profile --source-page KERNEL` takes the same page per stage
inside a profile run (mamba3_perf.profile.source_page_commands: the commands of both).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", required=True, help="a case id (perf cases lists them)")
    ap.add_argument("--stage", required=True)
    ap.add_argument("--kernel", required=True, help="the kernel's name (ncu --kernel-name)")
    ap.add_argument("--out", required=True, help="directory for the report and the CSV")
    ap.add_argument("--rows", type=int, default=40)
    a = ap.parse_args(argv)

    from mamba3_perf.analysis.sass import read_source_page
    from mamba3_perf.bench import select_cases
    from mamba3_perf.profile import source_page_commands
    from mamba3_perf.reports.console import source_page_tables
    from mamba3_perf.runs import write_text_atomic

    if shutil.which("ncu") is None:
        raise SystemExit("ncu is not on PATH")
    (case,) = select_cases(a.case)
    os.makedirs(a.out, exist_ok=True)
    report = os.path.join(a.out, f"{a.kernel}.ncu-rep")
    profile_cmd, export_cmd = source_page_commands(case, a.stage, a.kernel, report)
    res = subprocess.run(profile_cmd, capture_output=True, text=True)
    if res.returncode != 0 or not os.path.exists(report):
        raise SystemExit(f"ncu failed (exit {res.returncode}): {(res.stderr or res.stdout).strip()[-600:]}")
    page = subprocess.run(export_cmd, capture_output=True, text=True)
    if page.returncode != 0:
        raise SystemExit(f"ncu --page source failed (exit {page.returncode}): {page.stderr.strip()[-600:]}")
    write_text_atomic(os.path.join(a.out, f"{a.kernel}-sass.csv"), page.stdout)
    print(source_page_tables(read_source_page(page.stdout), rows=a.rows, title=a.kernel))


if __name__ == "__main__":
    main()
