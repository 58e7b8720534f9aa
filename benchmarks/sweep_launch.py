"""Sweep the launch options (num_warps, num_stages) of the (B, H, nchunks)-grid kernels of a
stage (pre, aux, post: every kernel launched with ``common.CHUNK_LAUNCH``; stage6's state
terms have their own ``TERMS_LAUNCH`` and its state pass ``PASS_LAUNCH``) and
report, per case and option pair, the stage's golden check, its do_bench time and each
kernel's device time from a torch.profiler trace. What the defaults in
``kernels/bwd_bwd/common.py`` rest on.

    python benchmarks/sweep_launch.py --cases N64_P64_R4_C16 --stage stage6_statepass \
        --configs 8:3,8:1,16:3,16:1,4:3 --json sweep.json
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--stage", default="stage6_statepass")
    ap.add_argument("--configs", default="8:3,8:1,16:3,16:1,4:3", help="num_warps:num_stages,...")
    ap.add_argument("--json", required=True)
    ap.add_argument("--compile-only", action="store_true",
                    help="run each config once (fills the compile cache; parallel processes may "
                         "do this, timing must then run alone on the GPU)")
    a = ap.parse_args(argv)

    from mamba3_perf import backend as be

    bk = be.resolve("auto")
    from mamba3_perf import bench, profile
    from mamba3_perf.kernels.accuracy import check
    from mamba3_perf.kernels.bwd_bwd import common
    from mamba3_perf.kernels.checking import oracles
    from mamba3_perf.runs import collect_environment, write_text_atomic

    configs = [tuple(int(v) for v in c.split(":")) for c in a.configs.split(",")]
    default = dict(common.CHUNK_LAUNCH)
    rows = []
    for case in bench.select_cases(a.cases):
        x = bench.prepare(case, device=bk.device)
        golden, ref = oracles(x, case) if not a.compile_only else (None, None)
        for warps, stages in configs:
            common.CHUNK_LAUNCH.clear()
            common.CHUNK_LAUNCH.update(num_warps=warps, num_stages=stages)
            row = {"case_id": case.id, "stage": a.stage, "num_warps": warps, "num_stages": stages}
            try:
                fn = bench.variant_runner(a.stage, case, x)
                out = fn()
                bench.synchronize(bk.device)
                if a.compile_only:
                    row["status"] = "compiled"
                    print(json.dumps(row), flush=True)
                    continue
                failed = [r.gradient for r in check(out, golden, ref) if not r.passed]
                del out
                row.update(status="wrong" if failed else "ok", failed=failed,
                           **bench.time_fn(fn, device=bk.device, warmup_ms=10, rep_ms=40))
                with tempfile.TemporaryDirectory() as d:
                    ev = profile.trace_variants(case, [a.stage], bk, Path(d))
                per = ev.groupby("kernel_name")["dur_us"].sum() / profile.TRACE_ITERS[bk.name]
                row["kernel_us"] = {k: float(v) for k, v in per.items()}
            except Exception as e:  # a config that does not compile or launch is a result
                row.update(status="not runnable", reason=bench.first_line(e))
            print(json.dumps(row), flush=True)
            rows.append(row)
            bench._free(bk.device)
        del x, golden, ref
        bench._free(bk.device)
    common.CHUNK_LAUNCH.clear()
    common.CHUNK_LAUNCH.update(default)
    rec = {"meta": {**collect_environment(), "command": "python benchmarks/sweep_launch.py "
                    + " ".join(argv or __import__("sys").argv[1:]), "default_chunk_launch": default},
           "rows": rows}
    write_text_atomic(a.json, json.dumps(rec, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
