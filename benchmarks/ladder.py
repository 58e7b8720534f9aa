"""Time the bwd_bwd ladder on the device without the CLI (same library call as ``perf bench``).

    python benchmarks/ladder.py --cases official --stages all,tilelang --json records/h200.json
"""
from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True, help="case set(s) and/or comma-separated case ids")
    ap.add_argument("--stages", default="all", help="all, or a comma list (may include tilelang)")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", default="runs")
    ap.add_argument("--name", default=None)
    ap.add_argument("--warmup-ms", type=float, default=25)
    ap.add_argument("--rep-ms", type=float, default=100)
    ap.add_argument("--rounds", type=int, default=1, help="interleaved timing rounds per case")
    ap.add_argument("--skip", action="append", default=[], metavar="STAGE=REASON",
                    help="record STAGE not runnable with REASON without running it (repeatable)")
    ap.add_argument("--no-check", action="store_true",
                    help="skip the golden check (compile-and-run warm-ups: the fp64 golden of a large "
                         "case in many parallel processes exhausts GPU memory)")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="time CUDA-graph replays of one call (CUDA only): device time without the host")
    ap.add_argument("--json", default=None, help="also write the JSON record here")
    a = ap.parse_args(argv)

    from mamba3_perf import backend as be

    bk = be.resolve(a.backend)  # before any kernel module loads (TRITON_INTERPRET)
    from mamba3_perf.bench import run_bench, select_cases, select_stages
    from mamba3_perf.reports.console import ladder_means, run_summary, run_title

    stages, tilelang = select_stages(a.stages)
    res = run_bench(select_cases(a.cases), stages, backend=bk, out_root=a.out, name=a.name,
                    warmup_ms=a.warmup_ms, rep_ms=a.rep_ms, tilelang=tilelang, json_path=a.json,
                    rounds=a.rounds, skip=dict(x.split("=", 1) for x in a.skip), check=not a.no_check,
                    graph=a.cuda_graph, progress=lambda desc: print(desc, flush=True))
    print(run_summary(res.table, title=run_title(res.run_path.name, bk, a.cuda_graph)))
    print(ladder_means(res.summary))
    print(f"wrote {res.run_path}" + (f" and {res.json_path}" if res.json_path else ""))


if __name__ == "__main__":
    main()
