"""Join per-case bench records (benchmarks/h200_ladder.sh writes one per case) into one.

    python benchmarks/merge_records.py OUT.json PART.json... --command "benchmarks/h200_ladder.sh ..."
"""
from __future__ import annotations

import argparse
import json


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("parts", nargs="+")
    ap.add_argument("--command", required=True, help="the command that made the parts")
    ap.add_argument("--unfinished", action="append", default=[], metavar="CASE=WHY",
                    help="a case whose process wrote no part, and why (repeatable)")
    a = ap.parse_args(argv)

    from mamba3_perf.bench import merge_records
    from mamba3_perf.runs import write_text_atomic

    recs = []
    for p in a.parts:
        with open(p) as f:
            recs.append(json.load(f))
    unfinished = dict(u.split("=", 1) for u in a.unfinished)
    rec = merge_records(recs, command=a.command, unfinished=unfinished)
    write_text_atomic(a.out, json.dumps(rec, indent=1, sort_keys=True, allow_nan=False) + "\n")
    print(f"wrote {a.out}: {len(rec['meta']['cases'])} cases, {len(rec['timings'])} timings")


if __name__ == "__main__":
    main()
