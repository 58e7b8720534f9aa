"""The ``perf`` command: thin typer adapters over the library.

Each sub-module registers its commands on :data:`app`; every project error becomes one
message line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import sys

import typer

from mamba3_perf.errors import Mamba3PerfError

app = typer.Typer(
    name="perf",
    help="Profile and analyse the Mamba-3 MIMO bwd_bwd kernel ladder.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules register themselves on `app` when imported.
from mamba3_perf.cli import bench as _bench  # noqa: E402,F401
from mamba3_perf.cli import check as _check  # noqa: E402,F401
from mamba3_perf.cli import profile as _profile  # noqa: E402,F401
from mamba3_perf.cli import reports as _reports  # noqa: E402,F401
from mamba3_perf.cli import traces as _traces  # noqa: E402,F401
from mamba3_perf.cli import traffic as _traffic  # noqa: E402,F401


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, standalone_mode=True)
    except SystemExit as e:  # typer exits through SystemExit
        return int(e.code or 0)
    except Mamba3PerfError as e:
        print(f"perf: error: {e}", file=sys.stderr)
        return 2
    return 0
