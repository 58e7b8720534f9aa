"""Run one variant once on one case: the process ``perf profile --hw-metrics`` puts under ncu.

``python -m mamba3_perf.profile_target --case-json '{...Case fields...}' --variant stage0
[--backend auto]``. Prints nothing (ncu's CSV goes to the same stdout).
"""
from __future__ import annotations

import argparse
import json


def run_once(case_json: str, variant: str, backend_name: str = "auto") -> None:
    from mamba3_perf import backend as be

    bk = be.resolve(backend_name)
    from mamba3_perf import bench
    from mamba3_perf.kernels.cases import Case

    case = Case(**json.loads(case_json))
    x = bench.prepare(case, device=bk.device)
    bench.variant_runner(variant, case, x)()
    bench.synchronize(bk.device)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m mamba3_perf.profile_target", description=__doc__)
    ap.add_argument("--case-json", required=True, help="the Case as a JSON object")
    ap.add_argument("--variant", required=True, help="a registered stage or 'tilelang'")
    ap.add_argument("--backend", default="auto")
    a = ap.parse_args(argv)
    run_once(a.case_json, a.variant, a.backend)


if __name__ == "__main__":
    main()
