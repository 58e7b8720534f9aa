"""The run store: atomic create, read back, refusal of incomplete runs, environment."""
import json
import os

import pandas as pd
import pytest

from mamba3_perf.errors import RunStoreError
from mamba3_perf.runs import FORMAT, collect_environment, create_run, list_runs, read_run


def _timings():
    return pd.DataFrame({
        "variant": ["stage0", "prod"], "case_id": ["c1", "c1"], "status": ["ok", "ok"],
        "reason": ["", ""], "median_us": [10.0, 2.0], "p10_us": [9.0, 1.9], "p90_us": [11.0, 2.1],
        "n_reps": [5, 5], "timing_kind": ["interpreter", "interpreter"],
    })


META = {"timing_kind": "interpreter", "device": "cpu", "stages": ["stage0", "prod"]}


def test_roundtrip(tmp_path):
    with create_run(tmp_path, "r1", META) as w:
        w.write_table("timings", _timings())
        w.write_table("extra", pd.DataFrame({"x": [1, 2]}))
    run = read_run(tmp_path / "r1")
    assert run.meta["format"] == FORMAT
    assert run.meta["stages"] == ["stage0", "prod"]
    assert set(run.tables) == {"timings", "extra"}
    pd.testing.assert_frame_equal(run.table("timings"), _timings(), check_dtype=False)
    assert list(run["extra"]["x"]) == [1, 2]
    assert [r.name for r in list_runs(tmp_path)] == ["r1"]


def test_exception_inside_block_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with create_run(tmp_path, "r2", META) as w:
            w.write_table("timings", _timings())
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RunStoreError):
        read_run(tmp_path / "r2")
    assert list_runs(tmp_path) == []


def test_incomplete_dirs_are_refused(tmp_path):
    bare = tmp_path / "half"
    bare.mkdir()
    _timings().to_parquet(bare / "timings.parquet")
    with pytest.raises(RunStoreError, match="run.json is missing"):
        read_run(bare)
    (bare / "run.json").write_text('{"format": "mamba3-perf-run/1", "tabl')  # truncated
    with pytest.raises(RunStoreError, match="unreadable"):
        read_run(bare)
    (bare / "run.json").write_text(json.dumps({"format": FORMAT, "tables": ["timings", "events"]}))
    with pytest.raises(RunStoreError, match="incomplete"):
        read_run(bare)
    (bare / "run.json").write_text(json.dumps({"format": "other/9", "tables": []}))
    with pytest.raises(RunStoreError, match="format"):
        read_run(bare)
    tmpdir = tmp_path / ".r3.tmp-abc"
    tmpdir.mkdir()
    (tmpdir / "run.json").write_text(json.dumps({"format": FORMAT, "tables": []}))
    with pytest.raises(RunStoreError, match="temporary"):
        read_run(tmpdir)
    assert list_runs(tmp_path) == []


def test_refuses_overwrite_and_bad_tables(tmp_path):
    with create_run(tmp_path, "r", META) as w:
        w.write_table("timings", _timings())
    with pytest.raises(RunStoreError, match="already exists"):
        with create_run(tmp_path, "r", META):
            pass
    with pytest.raises(RunStoreError, match="timing_kind"):
        with create_run(tmp_path, "x", {"timing_kind": "wallclock"}):
            pass
    bad = _timings().assign(status=["ok", "crashed"])
    with pytest.raises(RunStoreError, match="status"):
        with create_run(tmp_path, "y", META) as w:
            w.write_table("timings", bad)
    with pytest.raises(RunStoreError, match="missing columns"):
        with create_run(tmp_path, "z", META) as w:
            w.write_table("accuracy", pd.DataFrame({"variant": ["a"]}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_events_table_is_conformed(tmp_path):
    ev = pd.DataFrame({"source": ["kineto"], "device": ["0"], "kernel_name": ["k"],
                       "stage_tag": ["scan"], "start_us": [0.0], "dur_us": [1.5]})
    with create_run(tmp_path, "e", META) as w:
        w.write_table("events", ev)
    got = read_run(tmp_path / "e").table("events")
    assert "tensor_pipe_pct" in got.columns and got["dur_us"].iloc[0] == 1.5


def test_collect_environment_never_fails():
    env = collect_environment()
    assert env["versions"]["python"]
    assert env["backend"] in ("cpu", "cuda")
    json.dumps(env, default=str)


def test_worktree_tree_names_the_code_that_ran_where_head_is_stale(tmp_path):
    """A copy of a working tree with an older commit's .git (the device machine's): HEAD names the
    old commit, the tree hash the new one's code; the repository's own index is left alone."""
    import subprocess

    from mamba3_perf.runs import worktree_tree

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True,
                              env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                                   "GIT_COMMITTER_EMAIL": "t@t", "PATH": os.environ["PATH"]}).stdout.strip()

    git("init", "-q")
    (tmp_path / "k.py").write_text("A = 1\n")
    git("add", "k.py")
    git("commit", "-qm", "old")
    old = git("rev-parse", "HEAD^{tree}")
    assert worktree_tree(str(tmp_path)) == old
    (tmp_path / "k.py").write_text("A = 2\n")  # the newer code, uncommitted in this copy
    (tmp_path / "new.py").write_text("B = 1\n")  # a file the stale HEAD does not know
    (tmp_path / ".gitignore").write_text("/.scratch/\n")
    (tmp_path / ".scratch").mkdir()
    (tmp_path / ".scratch" / "run.sh").write_text("echo scratch, ignored\n")
    ran = worktree_tree(str(tmp_path))
    assert ran != old
    assert git("diff", "--cached", "--name-only") == ""  # the real index untouched
    git("add", "-A")
    git("commit", "-qm", "new")  # the commit that holds that code has that tree
    assert git("rev-parse", "HEAD^{tree}") == ran
    assert "run.sh" not in git("ls-tree", "-r", "--name-only", "HEAD")
    assert worktree_tree(str(tmp_path / "nowhere")) is None
    assert worktree_tree("/") is None
