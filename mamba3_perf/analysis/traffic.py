"""Per-kernel memory traffic of a stage, counted on the Triton interpreter.

Every launch of the stage runs on the interpreter with a sample of its programs (evenly spaced
over the grid, first and last included; the others are skipped), and every load and store the
sampled programs issue is recorded by address. Addresses are attributed to the launch's tensor
arguments (by name, as the kernel's signature names them: ``QR_S``, ``STATES``, ...), and per
(launch, tensor) the unique bytes read and written are extrapolated to the whole grid:

* ``*_no_reuse``: the mean unique bytes of one program times the programs of the grid, what
  DRAM moves if no two programs share a byte through the caches;
* ``*_bytes`` (compulsory): the unique bytes of the sample times programs / sampled, at most the
  tensor's size, what DRAM moves if every byte is fetched once per kernel. For tensors each
  program touches its own part of (a chunk's rows) both are exact; for tensors the programs
  share (q / k across the heads of a group, the biases) the truth lies between them.

The counts are of the plan that runs where the Gluon kernels do not (the interpreter, Ascend,
GPUs other than Hopper): on Hopper the Gluon aux and state_terms stand in for the Triton aux and
state_terms with the same tensors, the aux also forming the dstates increments (up to stage26;
from stage27 on, Hopper-only stages that drop scratch tensors, the counts are of their parent's
plan, which is what runs here). Caches, sectors
and vector widths are not modelled: bytes are elements touched times their size.

:func:`kernel_traffic` returns one row per (launch, tensor) of a stage (:func:`recording` and
:func:`traffic_table` count any interpreted launches); :func:`per_kernel` sums them per launch
with the time each would take at the device's HBM bandwidth.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mamba3_perf.analysis.limits import H200, DeviceSpec
from mamba3_perf.errors import BackendError
from mamba3_perf.kernels.cases import Case

COLUMNS = ("launch", "kernel", "tag", "tensor", "tensor_bytes", "read_bytes", "write_bytes",
           "read_no_reuse", "write_no_reuse", "programs", "sampled")


@dataclass
class _Launch:
    kernel: str
    programs: int
    sample: list  # (x, y, z) of the sampled programs, in run order
    tensors: list  # (name, start address, nbytes) in the signature's order
    accesses: list = field(default_factory=list)  # per sampled program: [(addresses, itemsize, write)]


def sample_programs(grid: tuple, samples: int) -> list[tuple[int, int, int]]:
    """``samples`` program ids of ``grid`` (at most all of them), evenly spaced in the order the
    programs are numbered (x outermost), the first and the last among them."""
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    total = gx * gy * gz
    flat = np.unique(np.linspace(0, total - 1, min(samples, total)).round().astype(np.int64))
    return [(int(f // (gy * gz)), int(f // gz % gy), int(f % gz)) for f in flat]


def _tensor_args(fn, args: tuple, kwargs: dict) -> list[tuple[str, int, int]]:
    """(names, start, nbytes) of the launch's non-empty tensor arguments, one entry per distinct
    memory range (arguments passed the same tensor share it: "MV/DSKIP")."""
    named = list(zip(fn.arg_names, args)) + list(kwargs.items())
    ranges: dict[tuple[int, int], list[str]] = {}  # in the signature's order
    for name, a in named:
        if hasattr(a, "data_ptr") and a.numel():
            ranges.setdefault((a.data_ptr(), a.numel() * a.element_size()), []).append(name)
    return [("/".join(names), start, n) for (start, n), names in ranges.items()]


def _check_counting(samples: int) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendError("the traffic count runs the kernels on the Triton interpreter: set "
                           "TRITON_INTERPRET=1 before they load (perf traffic does)")
    if samples < 1:
        raise ValueError(f"samples: expected at least 1 program per launch, got {samples}")


@contextlib.contextmanager
def recording(samples: int):
    """Inside: every interpreted launch runs only ``samples`` of its programs
    (:func:`sample_programs`) and is appended to the yielded list with the addresses they load
    and store (for :func:`traffic_table`). Needs the interpreter."""
    from triton.runtime import interpreter as interp

    _check_counting(samples)
    launches: list[_Launch] = []

    builder = interp.interpreter_builder
    run = interp.InterpretedFunction.run
    load = interp.InterpreterBuilder.create_masked_load
    store = interp.InterpreterBuilder.create_masked_store
    state = {}

    def sampled_run(self, *args, grid, warmup, **kwargs):
        if warmup:
            return run(self, *args, grid=grid, warmup=warmup, **kwargs)
        if callable(grid):
            raise NotImplementedError(f"{self.__name__}: a grid function; the traffic count takes grid tuples")
        full = (tuple(grid) + (1, 1))[:3]
        launch = _Launch(self.__name__, int(np.prod(full)), sample_programs(full, samples),
                         _tensor_args(self, args, kwargs))
        launches.append(launch)
        state.update(launch=launch, full=full)
        try:
            return run(self, *args, grid=(len(launch.sample),), warmup=warmup, **kwargs)
        finally:
            state.clear()

    def set_grid_dim(nx, ny, nz):
        builder.grid_dim = state["full"]

    def set_grid_idx(x, y, z):
        launch = state["launch"]
        builder.grid_idx = launch.sample[x]
        launch.accesses.append([])

    def record(ptrs, mask, write):
        addrs = np.asarray(ptrs.data).astype(np.int64, copy=False)
        m = np.broadcast_to(np.asarray(mask.data, dtype=bool), addrs.shape)
        state["launch"].accesses[-1].append((addrs[m].ravel(), ptrs.get_element_ty().primitive_bitwidth // 8,
                                             write))

    def masked_load(self, ptrs, mask, other, *a, **kw):
        record(ptrs, mask, False)
        return load(self, ptrs, mask, other, *a, **kw)

    def masked_store(self, ptrs, value, mask, *a, **kw):
        record(ptrs, mask, True)
        return store(self, ptrs, value, mask, *a, **kw)

    interp.InterpretedFunction.run = sampled_run
    interp.InterpreterBuilder.create_masked_load = masked_load
    interp.InterpreterBuilder.create_masked_store = masked_store
    builder.set_grid_dim = set_grid_dim
    builder.set_grid_idx = set_grid_idx
    try:
        yield launches
    finally:
        interp.InterpretedFunction.run = run
        interp.InterpreterBuilder.create_masked_load = load
        interp.InterpreterBuilder.create_masked_store = store
        del builder.set_grid_dim, builder.set_grid_idx


def _unique_bytes(chunks: list, starts: np.ndarray, ends: np.ndarray, write: bool) -> np.ndarray:
    """Unique bytes per tensor (by index into starts) of the accesses ``chunks`` of one kind."""
    out = np.zeros(len(starts), dtype=np.int64)
    parts = [(a, size) for a, size, w in chunks if w == write and a.size]
    if not parts:
        return out
    for size in {s for _, s in parts}:
        addrs = np.unique(np.concatenate([a for a, s in parts if s == size]))
        idx = np.searchsorted(starts, addrs, side="right") - 1
        inside = (idx >= 0) & (addrs < ends[np.maximum(idx, 0)])
        out += np.bincount(idx[inside], minlength=len(starts)) * size
    return out


def _launch_rows(i: int, launch: _Launch, tags: dict) -> list[dict]:
    tensors = sorted(launch.tensors, key=lambda t: t[1])  # by address, for the attribution
    names = [t[0] for t in tensors]
    starts = np.array([t[1] for t in tensors], dtype=np.int64)
    sizes = np.array([t[2] for t in tensors], dtype=np.int64)
    ends = starts + sizes
    k = max(len(launch.accesses), 1)
    every = [a for program in launch.accesses for a in program]
    scale = launch.programs / k
    rows = []
    kinds = {}
    for write in (False, True):
        union = _unique_bytes(every, starts, ends, write)
        per_program = sum(_unique_bytes(p, starts, ends, write) for p in launch.accesses) / k
        kinds[write] = (np.minimum(union * scale, sizes), per_program * launch.programs)
    tag = tags.get(launch.kernel)
    order = {t[0]: k for k, t in enumerate(launch.tensors)}  # rows in the signature's order
    for j, name in sorted(enumerate(names), key=lambda jn: order[jn[1]]):
        if not (kinds[False][1][j] or kinds[True][1][j]):
            continue
        rows.append(dict(launch=i, kernel=launch.kernel, tag=tag, tensor=name, tensor_bytes=int(sizes[j]),
                         read_bytes=float(kinds[False][0][j]), write_bytes=float(kinds[True][0][j]),
                         read_no_reuse=float(kinds[False][1][j]), write_no_reuse=float(kinds[True][1][j]),
                         programs=launch.programs, sampled=len(launch.accesses)))
    return rows


def traffic_table(launches: list, tags: dict | None = None) -> pd.DataFrame:
    """The rows (:data:`COLUMNS`) of launches recorded by :func:`recording`; ``tags``: kernel
    name -> stage label."""
    rows = [r for i, launch in enumerate(launches) for r in _launch_rows(i, launch, tags or {})]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def kernel_traffic(stage: str, case: Case, *, samples: int = 8, inputs: dict | None = None) -> pd.DataFrame:
    """Bytes each launch of ``stage`` reads and writes per tensor on ``case`` (module docstring),
    from ``samples`` programs of each launch run on the interpreter; one row per (launch,
    tensor), columns :data:`COLUMNS`. ``inputs``: the case's inputs (default: generated on the
    CPU at the case's size). Needs the interpreter (TRITON_INTERPRET=1 before the kernels load)."""
    from mamba3_perf.kernels.checking import run_stage
    from mamba3_perf.kernels.registry import get_stage, kernel_tags

    _check_counting(samples)  # before the inputs are made (a minute at full size)
    spec = get_stage(stage.split("@")[0])  # an unknown stage fails here, before the inputs are made
    if inputs is None:
        from mamba3_perf.bench import prepare

        inputs = prepare(case, device="cpu")
    with recording(samples) as launches:
        run_stage(stage, inputs, case)
    return traffic_table(launches, {name: (spec.tag_of(name) or tag).value
                                    for name, (tag, _) in kernel_tags().items()})


# The Gluon kernels Hopper runs in place of the Triton kernels the interpreter counts (stage23,
# stage24): the same tensors, so a measured time of one is set beside the count of the other.
GLUON_STANDS_IN = {
    "bwd_bwd_aux_gluon_kernel": "bwd_bwd_aux_streamed_kernel",
    "bwd_bwd_state_terms_gluon_kernel": "bwd_bwd_state_terms_kernel",
}


def per_kernel(traffic: pd.DataFrame, device: DeviceSpec = H200, measured: pd.DataFrame | None = None
               ) -> pd.DataFrame:
    """One row per launch: compulsory and no-reuse bytes read and written, and the time the
    compulsory bytes take at ``device``'s HBM bandwidth (``hbm_us``). ``measured``: a
    KERNEL_EVENTS frame (mamba3_perf.traces.load) of one stage's runs on the same case; each
    kernel's median ``dur_us`` and, where the trace has them (Nsight Compute), ``dram_bytes``
    join as ``measured_us``, ``tbps`` (compulsory bytes per measured second, TB/s), ``dram_bytes``
    and ``measured_kernel`` (a Gluon kernel measured in place of the Triton kernel counted:
    :data:`GLUON_STANDS_IN`)."""
    sums = ["read_bytes", "write_bytes", "read_no_reuse", "write_no_reuse"]
    out = traffic.groupby(["launch", "kernel", "tag"], sort=True, dropna=False)[sums].sum().reset_index()
    out["bytes"] = out["read_bytes"] + out["write_bytes"]
    out["no_reuse"] = out["read_no_reuse"] + out["write_no_reuse"]
    out["hbm_us"] = out["bytes"] / device.hbm_bytes_per_s * 1e6
    if measured is not None:
        ev = measured.assign(counted=measured["kernel_name"].map(lambda k: GLUON_STANDS_IN.get(k, k)))
        med = ev.groupby("counted").agg(measured_kernel=("kernel_name", "first"), measured_us=("dur_us", "median"),
                                        dram_bytes=("dram_bytes", "median"))
        out = out.join(med, on="kernel")
        out["tbps"] = out["bytes"] / out["measured_us"] / 1e6
    return out
