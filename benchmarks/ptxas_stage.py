"""Compile every kernel one stage launches for sm_90 on a machine without a GPU, and print what
ptxas reports per kernel: shared memory, registers per thread, spill bytes, compile seconds, and
the programs per SM those allow (by registers and shared memory, analysis.occupancy).

    python benchmarks/ptxas_stage.py prod 64 64 4 16            # STAGE N P R C
    python benchmarks/ptxas_stage.py stage0 32 64 4 16 --prec ieee --warps 4
    python benchmarks/ptxas_stage.py stage15_passwave 128 64 4 16 --sass   # + instruction mix
    python benchmarks/ptxas_stage.py stage25_subchunk 64 128 4 16 --knob aux_gluon.WIDE_P=1
    python benchmarks/ptxas_stage.py stage30_stepdesc 128 64 4 16 --kernel aux --banks

``--sass`` also disassembles each kernel (the ``nvdisasm`` bundled with Triton) and prints what
``perf sass`` prints of a listing (mamba3_perf.reports.console.static_listing_tables): its static
instruction mix, whole and per loop body (mamba3_perf.analysis.sass.instruction_mix), for each
wgmma wait the instructions the warp runs between its wgmma and the wait (mma_waits), and any
write of a wgmma's register operand before its wait (mma_register_hazards).
``--banks`` prints each Gluon kernel's copies between registers and shared memory with their
shared-memory wavefronts, excess over the ideal and bank conflicts (mamba3_perf.analysis.banks).

How the launches are captured and compiled: mamba3_perf/kernels/codegen.py. The Triton that
compiles is the one imported (the H200 runs 3.6: PYTHONPATH=<a triton 3.6 install> gives its
codegen).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time

os.environ.pop("TRITON_INTERPRET", None)  # real JITFunctions: their launches are captured

import triton  # noqa: E402

from mamba3_perf.analysis.banks import BANK_FIELDS, compile_with_accesses, summary  # noqa: E402
from mamba3_perf.analysis.occupancy import occupancy  # noqa: E402
from mamba3_perf.kernels.codegen import capture_launches, compile_launch  # noqa: E402
from mamba3_perf.kernels.knobs import single_knobs  # noqa: E402
from mamba3_perf.reports.console import static_listing_tables  # noqa: E402


def ptxas_report(fn, args: tuple, kwargs: dict, *, prec: str | None, warps: int | None,
                 stages: int | None = None, sass: bool = False, maxnreg: int | None = None,
                 banks: bool = False) -> str:
    t0 = time.time()
    options = dict(prec=prec, warps=warps, stages=stages, maxnreg=maxnreg)
    if banks:  # the same compile, its register <-> shared copies recorded as the front end runs
        k, opts, accesses = compile_with_accesses(fn, args, kwargs, **options)
    else:
        k, opts = compile_launch(fn, args, kwargs, **options)
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(ptx, "w") as f:
            f.write(k.asm["ptx"])
        for exe in ("ptxas", "ptxas-blackwell"):  # the PTX may need the newer of the two bundled
            res = subprocess.run([os.path.join(bindir, exe), "-arch=sm_90a", "-v", ptx, "-o", cubin],
                                 capture_output=True, text=True)
            if res.returncode == 0:
                break
        if res.returncode != 0:
            raise RuntimeError(f"ptxas failed on {fn.__name__}: {res.stderr.strip()[-300:]}")
        listing = subprocess.run([os.path.join(bindir, "nvdisasm"), "-c", cubin], capture_output=True,
                                 text=True, check=True).stdout if sass else ""
    info = " | ".join(line.split("ptxas info    :")[-1].strip() for line in res.stderr.splitlines()
                      if "Used" in line or "spill" in line)
    report = (f"{fn.__name__:30s} warps={opts['num_warps']} stages={opts['num_stages']} "
              + (f"maxnreg={opts['maxnreg']} " if opts.get("maxnreg") else "")
              + f"smem={k.metadata.shared} B {time.time() - t0:.0f}s | {info} | {residency(res.stderr, opts, k)}")
    if sass:  # the tables `perf sass` prints for a listing
        report += "\n" + static_listing_tables(listing, title=fn.__name__)
    if banks:
        report += "\n" + banks_table(accesses)
    return report


def residency(ptxas_log: str, opts: dict, k) -> str:
    """Programs of the kernel per H200 SM by its registers (ptxas's count) and shared memory, and
    the resource that stops one more (analysis.occupancy): '3 programs/SM (registers)'. Shared
    memory counts too: a kernel under its register cap can still fit fewer programs by it."""
    used = re.search(r"Used (\d+) registers", ptxas_log)
    if not used:
        return "programs/SM: ? (no register count)"
    occ = occupancy(int(used.group(1)), 32 * opts["num_warps"], k.metadata.shared)
    return f"{occ.blocks_per_sm} programs/SM ({occ.limiter})"


def banks_table(accesses) -> str:
    """A kernel's register <-> shared copies per site (mamba3_perf.analysis.banks.summary), the
    layouts of those with excess wavefronts below the table; per warp, for one copy."""
    table = summary(accesses)
    if table.empty:
        return "  (no register <-> shared copies: not a Gluon kernel)"
    lines = [table[[f for f in BANK_FIELDS if f not in ("dtype", "note")]].to_string(index=False)]
    for i, row in table[table["excess"] > 0].iterrows():
        lines.append(f"  {row['line']} {row['via']} {row['kind']}: {row['register_layout']} -> {row['shared_layout']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage")
    ap.add_argument("N", type=int)
    ap.add_argument("P", type=int)
    ap.add_argument("R", type=int)
    ap.add_argument("C", type=int)
    ap.add_argument("--prec", default=None,
                    help="override the dots' input precision PREC (default: the stage's CUDA choice)")
    ap.add_argument("--warps", type=int, default=None, help="override every kernel's num_warps")
    ap.add_argument("--stages", type=int, default=None, help="override every kernel's num_stages")
    ap.add_argument("--maxnreg", type=int, default=None, help="cap every kernel's registers per thread")
    ap.add_argument("--kernel", default=None, help="only the kernels whose name contains this")
    ap.add_argument("--sass", action="store_true",
                    help="also print each kernel's static SASS instruction mix, whole and per loop")
    ap.add_argument("--banks", action="store_true",
                    help="also print each Gluon kernel's register <-> shared copies and their wavefronts")
    ap.add_argument("--knob", action="append", default=[], metavar="MODULE.ATTR=v",
                    help="set a kernels knob (mamba3_perf.kernels.knobs) for this compile; repeatable")
    a = ap.parse_args(argv)
    try:
        knobs = single_knobs(a.knob)
    except ValueError as e:
        ap.error(str(e))
    with knobs:
        for fn, args, kwargs in capture_launches(a.stage, a.N, a.P, a.R, a.C):
            if a.kernel and a.kernel not in fn.__name__:
                continue
            print(ptxas_report(fn, args, kwargs, prec=a.prec, warps=a.warps, stages=a.stages, sass=a.sass,
                               maxnreg=a.maxnreg, banks=a.banks),
                  flush=True)


if __name__ == "__main__":
    main()
