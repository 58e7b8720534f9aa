"""The run store: one on-disk format shared by ``perf profile``, ``perf bench`` and ``perf import``.

Layout of one run::

    <root>/<name>/
        run.json            metadata, written last (see below)
        <table>.parquet     one file per table

``run.json`` holds ``format`` (:data:`FORMAT`), ``created`` (UTC ISO-8601), ``command``
(the command line), ``timing_kind`` ("device" or "interpreter"), ``tables`` (the table
names the run holds) and, by convention, ``cases`` (list of Case dicts), ``stages``,
``backend``, ``device``, ``clocks``, ``driver``, ``versions``, ``git_commit``, ``git_tree``
(:func:`worktree_tree`: the tree the run's code was, which names its commit where ``git_commit``
is a stale HEAD). Other keys are free-form and kept as given.

Writing is atomic: :func:`create_run` writes into a hidden temporary sibling directory
(``.<name>.tmp-<random>``) and renames it to ``<name>`` only when the ``with`` block exits
without an exception; on an exception the temporary directory is removed. A reader
(:func:`read_run`, :func:`list_runs`) refuses temporary directories and directories whose
``run.json`` is missing, unreadable, of another format, or names a table that is absent.

Standard tables (:data:`STANDARD_TABLES`; other table names are stored as given):

``timings``  one row per (variant, case): variant, case_id, status ("ok", "wrong",
             "not runnable"), reason (why not ok; empty when ok), median_us, p10_us, p90_us,
             n_reps, timing_kind ("device" / "interpreter").
``accuracy`` one row per (variant, case, gradient): variant, case_id, gradient, err,
             ref_err, bound, passed.
``events``   the KERNEL_EVENTS trace schema (:mod:`mamba3_perf.traces.schema`).
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Iterator, Mapping

import pandas as pd

from mamba3_perf.errors import RunStoreError

FORMAT = "mamba3-perf-run/1"
META_FILE = "run.json"
TMP_MARK = ".tmp-"
TIMING_KINDS = ("device", "interpreter")
STATUSES = ("ok", "wrong", "not runnable")

# Required columns of the standard tables (``events`` is checked by traces.schema.conform).
STANDARD_TABLES: dict[str, tuple[str, ...]] = {
    "timings": ("variant", "case_id", "status", "reason", "median_us", "p10_us", "p90_us",
                "n_reps", "timing_kind"),
    "accuracy": ("variant", "case_id", "gradient", "err", "ref_err", "bound", "passed"),
    "events": (),
}


def validate_table(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """Check a standard table's columns and values; return the frame to store."""
    if name == "events":
        from mamba3_perf.traces.schema import conform

        return conform(df, origin=f"table {name!r}")
    required = STANDARD_TABLES.get(name)
    if required is None:
        return df
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise RunStoreError(f"table {name!r}: missing columns {missing}; expected {list(required)}")
    if name == "timings":
        bad = sorted(set(df["status"].dropna()) - set(STATUSES))
        if bad or df["status"].isna().any():
            raise RunStoreError(f"table 'timings': status must be one of {STATUSES}, got {bad or 'NA'}")
        kinds = sorted(set(df["timing_kind"].dropna()) - set(TIMING_KINDS))
        if kinds:
            raise RunStoreError(f"table 'timings': timing_kind must be one of {TIMING_KINDS}, got {kinds}")
    return df


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or os.sep in name or name.startswith("."):
        raise RunStoreError(f"run name must be a plain, non-hidden directory name, got {name!r}")


def _check_meta(meta: Mapping) -> None:
    kind = meta.get("timing_kind")
    if kind not in TIMING_KINDS:
        raise RunStoreError(f"run metadata: timing_kind must be one of {TIMING_KINDS}, got {kind!r}")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to a hidden sibling, then rename it over ``path`` (readers never see half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """:func:`write_bytes_atomic` of ``text`` in UTF-8."""
    return write_bytes_atomic(path, text.encode("utf-8"))


class RunWriter:
    """Writes tables into a run's temporary directory; see :func:`create_run`."""

    def __init__(self, tmp_dir: Path, meta: dict):
        self.path = tmp_dir
        self.meta = meta
        self.tables: list[str] = []

    def write_table(self, name: str, df: pd.DataFrame) -> None:
        """Store ``df`` as ``<name>.parquet`` (standard tables are validated first)."""
        _check_name(name)
        if name in self.tables:
            raise RunStoreError(f"table {name!r} written twice in one run")
        df = validate_table(name, df)
        df.reset_index(drop=True).to_parquet(self.path / f"{name}.parquet", index=False)
        self.tables.append(name)


@contextlib.contextmanager
def create_run(out_root: str | os.PathLike, name: str, meta: Mapping) -> Iterator[RunWriter]:
    """Create the run ``out_root/name`` atomically.

    ``meta`` must hold ``timing_kind``; ``format``, ``created``, ``command`` and ``tables`` are
    filled in. The run appears under its final name only if the block completes; an existing
    run of that name is never overwritten (:class:`RunStoreError`).
    """
    _check_name(name)
    _check_meta(meta)
    root = Path(out_root)
    final = root / name
    if final.exists():
        raise RunStoreError(f"run {str(final)!r} already exists; choose another name")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}{TMP_MARK}", dir=root))
    full = {
        "command": " ".join(sys.argv),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **dict(meta),
        "format": FORMAT,
    }
    writer = RunWriter(tmp, full)
    try:
        yield writer
        full["tables"] = list(writer.tables)
        write_text_atomic(tmp / META_FILE, json.dumps(full, indent=1, default=str, sort_keys=True))
        try:
            os.rename(tmp, final)
        except OSError as e:
            raise RunStoreError(f"cannot move run into place at {str(final)!r}: {e}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class Run:
    """A stored run: ``meta`` (run.json) and its tables, each loaded on first use."""

    path: Path
    meta: dict
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self.meta.get("tables", ()))

    def has(self, name: str) -> bool:
        return name in self.tables

    def table(self, name: str) -> pd.DataFrame:
        if name not in self.tables:
            raise RunStoreError(f"run {str(self.path)!r} has no table {name!r}; it has {list(self.tables)}")
        if name not in self._cache:
            try:
                self._cache[name] = pd.read_parquet(self.path / f"{name}.parquet")
            except (OSError, ValueError) as e:
                raise RunStoreError(f"run {str(self.path)!r}: table {name!r} is unreadable: {e}") from None
        return self._cache[name].copy()

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self.table(name)


def read_run(path: str | os.PathLike) -> Run:
    """Open a complete run directory; raise :class:`RunStoreError` for anything else."""
    p = Path(path)
    if TMP_MARK in p.name:
        raise RunStoreError(f"{str(p)!r} is a run still being written (temporary directory)")
    if not p.is_dir():
        raise RunStoreError(f"run directory {str(p)!r} does not exist")
    mf = p / META_FILE
    if not mf.is_file():
        raise RunStoreError(f"{str(p)!r} is not a complete run: {META_FILE} is missing")
    try:
        meta = json.loads(mf.read_text())
    except (OSError, ValueError) as e:
        raise RunStoreError(f"{str(mf)!r} is unreadable: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise RunStoreError(f"{str(mf)!r}: format expected {FORMAT!r}, got {got!r}")
    tables = meta.get("tables")
    if not isinstance(tables, list):
        raise RunStoreError(f"{str(mf)!r}: 'tables' list is missing (incomplete run)")
    absent = [t for t in tables if not (p / f"{t}.parquet").is_file()]
    if absent:
        raise RunStoreError(f"run {str(p)!r} is incomplete: tables {absent} are missing")
    return Run(path=p, meta=meta)


def list_runs(root: str | os.PathLike) -> list[Run]:
    """Every complete run directly under ``root``, oldest first; incomplete ones are skipped."""
    r = Path(root)
    if not r.is_dir():
        return []
    runs = []
    for child in sorted(r.iterdir()):
        if child.name.startswith(".") or not child.is_dir():
            continue
        try:
            runs.append(read_run(child))
        except RunStoreError:
            continue
    return sorted(runs, key=lambda run: (str(run.meta.get("created", "")), run.name))


# ---------------------------------------------------------------------------- environment


def _run_cmd(args: list[str], cwd: str | None = None, env: dict | None = None) -> str | None:
    try:
        res = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=10, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _nvidia_smi() -> dict:
    if shutil.which("nvidia-smi") is None:
        return {}
    out = _run_cmd(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,driver_version",
                    "--format=csv,noheader,nounits"])
    if not out:
        return {}
    first = [x.strip() for x in out.splitlines()[0].split(",")]
    if len(first) != 4:
        return {}
    sm, mem, max_sm, driver = first
    return {"clocks": {"sm_mhz": sm, "mem_mhz": mem, "max_sm_mhz": max_sm}, "driver": driver}


def worktree_tree(cwd: str | None = None) -> str | None:
    """The git tree hash of the working tree as it is: every file git does not ignore, edits, new
    and removed files included (``git write-tree`` after ``git add -A`` into a scratch copy of the
    index, or one read from HEAD; the repository's own index is not touched). A commit whose tree
    (``git log --format='%h %T'``) is this hash holds exactly the code that ran, where HEAD may be
    stale: a copy of the working tree carries the .git of an older commit (the device machine's
    does, and it copies the files git does not ignore). Scratch files kept beside the code make
    the hash match no commit: keep them under an ignored path (``/.scratch/``). None outside a
    git work tree."""
    with tempfile.TemporaryDirectory() as tmp:
        scratch = os.path.join(tmp, "index")
        env = dict(os.environ, GIT_INDEX_FILE=scratch)
        index = _run_cmd(["git", "rev-parse", "--path-format=absolute", "--git-path", "index"], cwd=cwd)
        if index is None:
            return None
        try:  # a copy of the real index: its stat cache spares hashing the files that did not change
            shutil.copyfile(index, scratch)
        except OSError:
            if _run_cmd(["git", "read-tree", "HEAD"], cwd=cwd, env=env) is None:
                return None
        if _run_cmd(["git", "add", "-A"], cwd=cwd, env=env) is None:
            return None
        return _run_cmd(["git", "write-tree"], cwd=cwd, env=env)


def collect_environment() -> dict:
    """Versions, host, git commit and (on CUDA) device, driver and clocks; never raises."""
    env: dict = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "versions": {
            "python": platform.python_version(),
            "torch": _version("torch"),
            "triton": _version("triton"),
            "torch_npu": _version("torch_npu"),
            "mamba3_perf": _version("mamba3-perf"),
        },
        # a copy of the tree without .git (the device machine) names its commit in the env
        "git_commit": (os.environ.get("MAMBA3_PERF_COMMIT")
                       or _run_cmd(["git", "rev-parse", "HEAD"], cwd=os.getcwd())),
        "backend": "cpu",
        "device": platform.processor() or platform.machine(),
    }
    if env["git_commit"]:
        env["git_dirty"] = bool(_run_cmd(["git", "status", "--porcelain", "--untracked-files=no"]))
        # the code that ran, whatever HEAD says: find its commit by this tree hash
        env["git_tree"] = worktree_tree(os.getcwd())
    try:
        import torch

        if torch.cuda.is_available():
            env["backend"] = "cuda"
            env["device"] = torch.cuda.get_device_name(0)
            env["versions"]["cuda"] = torch.version.cuda
            env.update(_nvidia_smi())
    except Exception as e:  # a broken CUDA setup must not stop the record
        env["device_error"] = repr(e)[:300]
    return env


def write_rows_record(path: str | os.PathLike, script: str, argv: list[str] | None, rows: list,
                      env: dict | None = None, **meta) -> Path:
    """A benchmark script's record, atomically: ``{"meta": environment (``env``, default
    :func:`collect_environment`'s now) + the command that made it (+ ``meta``), "rows": rows}``
    (benchmarks/sweep_launch.py, sweep_knob.py, host_overhead.py)."""
    command = f"python benchmarks/{script} " + " ".join(sys.argv[1:] if argv is None else argv)
    rec = {"meta": {**(collect_environment() if env is None else env), "command": command, **meta}, "rows": rows}
    return write_text_atomic(path, json.dumps(rec, indent=1, sort_keys=True) + "\n")


def cases_recorded(cases: list, path: str | os.PathLike, script: str, argv: list[str] | None, rows: list,
                   **meta) -> Iterator:
    """Each of ``cases``, and once the caller's loop is done with it the record of ``rows`` so far
    (:func:`write_rows_record`; ``complete`` false until the last case is done): a case that hangs
    until a device call's deadline, or fails, loses its own rows only. The environment is collected
    once, after the first case (the GPU's clocks then those of a device at work, not idle), and
    written with every record."""
    env = None
    for i, case in enumerate(cases):
        yield case
        env = collect_environment() if env is None else env
        write_rows_record(path, script, argv, rows, env, complete=i == len(cases) - 1, **meta)
