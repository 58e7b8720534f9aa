"""Fixture: a stored synthetic run (timings + events) for the report and CLI tests."""
import pytest

from mamba3_perf.runs import create_run
from synthetic_run import events, timings


@pytest.fixture
def run_dir(tmp_path):
    with create_run(tmp_path, "r1", {"timing_kind": "interpreter", "device": "cpu",
                                     "stages": ["stage0", "stage1_pre", "prod"],
                                     "versions": {"python": "3.11"}, "git_commit": "abc123"}) as w:
        w.write_table("timings", timings())
        w.write_table("events", events())
    return tmp_path / "r1"
