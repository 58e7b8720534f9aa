"""How many programs of a kernel one SM holds at once, and which resource stops it holding more.

A GPU kernel hides latency with the other warps resident on its SM; how many can be resident
follows from its launch: registers per thread, threads per block, shared memory per block. The
CUDA rules (CUDA C++ Programming Guide, compute capability 9.0; the device figures are in
:class:`~mamba3_perf.analysis.limits.DeviceSpec`):

* registers: a warp takes ``registers_per_thread x 32`` rounded up to the allocation unit
  (256 on Hopper); blocks per SM = registers of the SM // (that x warps per block);
* shared memory: a block takes its shared memory plus the reserved 1 KiB, rounded up to the
  allocation unit (128 B); blocks per SM = the SM's shared memory (228 KiB) // that;
* warps: the SM's 64 warps // warps per block; blocks: at most 32 per SM;
* grid: a launch of fewer blocks than SMs x that limit fills the SMs to its grid only
  (``waves`` < 1: the grid, not a resource, bounds the warps resident on average).

The least of the resource limits is the blocks per SM, and its name the ``limiter``. Nsight
Compute reports the same limits (``launch__occupancy_limit_*``): its blocks per SM equal these on
every launch of the raw pages in records/ (45 launches; tests check them), though its
shared-memory limit alone can read lower: the driver gives a kernel that needs little shared
memory a smaller carveout of the SM's 228 KiB (the rest serves as L1), never so small that it
lowers the blocks per SM, while this limit is of the whole 228 KiB. The achieved occupancy ncu
measures (``warps_active_pct``) sits at or below the theoretical one here. Pure: numbers or a
KERNEL_EVENTS frame in, no I/O.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from mamba3_perf.analysis.limits import H200, DeviceSpec

LIMITERS = ("warps", "registers", "shared_mem", "blocks")  # a tie names the first: "warps" is a full SM


@dataclass(frozen=True)
class Occupancy:
    """Residency of one kernel launch on one SM of ``device``."""

    blocks_per_sm: int  # the least of ``limits``
    limits: dict[str, int]  # blocks per SM each resource allows (keys: LIMITERS)
    limiter: str  # the resource whose limit is the least (the first such, in LIMITERS order)
    warps_per_sm: int
    theoretical_pct: float  # warps_per_sm / the SM's most warps, in %
    waves: float  # grid blocks / (SMs x blocks_per_sm); nan without a grid
    sms_busy: float  # SMs the grid keeps busy: all from one wave on, else one a block; nan without a grid


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit if unit > 0 else x


def occupancy(registers_per_thread: int, threads_per_block: int, smem_bytes: int = 0,
              grid_blocks: int | None = None, device: DeviceSpec = H200) -> Occupancy:
    """The residency of a launch with these figures on ``device`` (module docstring)."""
    if device.kind != "gpu" or not device.max_warps_per_sm:
        raise ValueError(f"{device.name}: no SM residency figures (GPU only)")
    if threads_per_block < 1 or registers_per_thread < 0 or smem_bytes < 0:
        raise ValueError(f"bad launch: {threads_per_block} threads, {registers_per_thread} registers, "
                         f"{smem_bytes} B shared memory")
    warps = -(-threads_per_block // 32)
    per_warp = _round_up(max(registers_per_thread, 1) * 32, device.reg_alloc_unit)
    per_block_smem = _round_up(smem_bytes + device.smem_reserved_per_block, device.smem_alloc_unit)
    limits = {
        "registers": device.registers_per_sm // (per_warp * warps),
        "shared_mem": device.smem_per_sm_bytes // per_block_smem if per_block_smem else device.max_blocks_per_sm,
        "warps": device.max_warps_per_sm // warps,
        "blocks": device.max_blocks_per_sm,
    }
    blocks = min(limits.values())
    limiter = next(k for k in LIMITERS if limits[k] == blocks)
    waves = (grid_blocks / (device.sm_count * blocks) if grid_blocks and blocks else math.nan)
    # a grid under one wave: the block scheduler spreads its blocks one per SM, however many fit
    busy = float(min(device.sm_count, grid_blocks)) if grid_blocks else math.nan
    return Occupancy(blocks, limits, limiter, blocks * warps,
                     100.0 * blocks * warps / device.max_warps_per_sm, waves, busy)


def next_block(registers_per_thread: int, threads_per_block: int, smem_bytes: int = 0,
               device: DeviceSpec = H200) -> tuple[int | None, int | None]:
    """What a launch must fit in for one more of its blocks per SM than :func:`occupancy` gives:
    (the most registers per thread, the most shared memory per block in bytes), each by the same
    allocation rules; (None, None) where the warps or blocks per SM forbid one more whatever the
    resources. E.g. state_terms at P = 64 (183 registers, 128 threads, 77,840 B: two per SM) needs
    168 registers and 76,800 B for a third."""
    occ = occupancy(registers_per_thread, threads_per_block, smem_bytes, None, device)
    warps = -(-threads_per_block // 32)
    target = occ.blocks_per_sm + 1
    if target * warps > device.max_warps_per_sm or target > device.max_blocks_per_sm:
        return None, None
    per_warp = device.registers_per_sm // (target * warps) // device.reg_alloc_unit * device.reg_alloc_unit
    registers = min(per_warp // 32, device.max_registers_per_thread or per_warp // 32)
    per_block = device.smem_per_sm_bytes // target // device.smem_alloc_unit * device.smem_alloc_unit
    return registers, max(per_block - device.smem_reserved_per_block, 0)


def _threads(block) -> int | None:
    """Threads of an 'x,y,z' block string (the schema's ``block``); None when unknown."""
    if block is None or pd.isna(block):
        return None
    try:
        return math.prod(int(d) for d in str(block).split(","))
    except ValueError:
        return None


def _one_source(g: pd.DataFrame) -> pd.DataFrame:
    """The rows of one profiler among ``g``'s (a profile run holds a kernel's Kineto launches
    and its ncu replay: their times must not be added): ncu's where present, which measured the
    warps too, else the first source's."""
    if "source" not in g.columns or g["source"].nunique(dropna=False) < 2:
        return g
    sources = list(dict.fromkeys(g["source"]))
    return g[g["source"] == ("ncu" if "ncu" in sources else sources[0])]


OCCUPANCY_COLUMNS = ("total_us", "launches", "registers_per_thread", "smem_bytes", "threads", "blocks_per_sm",
                     "limiter", "theoretical_pct", "warps_active_pct", "waves", "sms_busy", "next_registers",
                     "next_smem_bytes")


def kernel_occupancy(df: pd.DataFrame, device: DeviceSpec = H200) -> pd.DataFrame:
    """Per kernel (and variant, stage tag) of a KERNEL_EVENTS frame with registers and block
    size (Nsight Compute, Kineto on CUDA): device time summed over its ``launches``, registers,
    shared memory, threads, the blocks per SM and limiter of :func:`occupancy`, the theoretical
    warps resident (% of the SM's), the measured ``warps_active_pct`` where ncu gave it,
    ``waves``, ``sms_busy`` (the SMs its grid keeps busy), and what one more block per SM would
    need (:func:`next_block`: ``next_registers``, ``next_smem_bytes``; NaN where the warps or
    blocks per SM forbid it). A kernel launched with several configurations takes its longest
    launch's; one traced by two profilers (a profile run's Kineto trace and ncu replay), ncu's
    rows. Longest kernels first; empty for a frame without those columns or a device without SM
    figures (an Ascend NPU)."""
    keys = [k for k in ("variant", "stage_tag", "kernel_name") if k in df.columns]
    columns = keys + list(OCCUPANCY_COLUMNS)
    strings = (*keys, "limiter")
    empty = pd.DataFrame({c: pd.Series([], dtype="string" if c in strings else "float64") for c in columns})
    need = ("registers_per_thread", "block", "dur_us")
    if device.kind != "gpu" or not device.max_warps_per_sm or any(c not in df.columns for c in need):
        return empty
    have = df[df["registers_per_thread"].notna() & df["block"].notna()]
    rows = []
    for key, g in have.groupby(keys, dropna=False, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        g = _one_source(g)
        top = g.loc[g["dur_us"].idxmax()]
        threads = _threads(top["block"])
        if not threads:
            continue
        smem = top.get("smem_bytes")
        smem = 0 if smem is None or pd.isna(smem) else int(smem)
        grid = top.get("block_dim")
        grid = None if grid is None or pd.isna(grid) else int(grid)
        occ = occupancy(int(top["registers_per_thread"]), threads, smem, grid, device)
        measured = top.get("warps_active_pct")
        next_regs, next_smem = next_block(int(top["registers_per_thread"]), threads, smem, device)
        rows.append({**dict(zip(keys, key)), "total_us": float(g["dur_us"].sum()),
                     "launches": float(len(g)),
                     "registers_per_thread": float(top["registers_per_thread"]), "smem_bytes": float(smem),
                     "threads": float(threads), "blocks_per_sm": float(occ.blocks_per_sm),
                     "limiter": occ.limiter, "theoretical_pct": occ.theoretical_pct,
                     "warps_active_pct": math.nan if measured is None or pd.isna(measured) else float(measured),
                     "waves": occ.waves, "sms_busy": occ.sms_busy,
                     "next_registers": math.nan if next_regs is None else float(next_regs),
                     "next_smem_bytes": math.nan if next_smem is None else float(next_smem)})
    if not rows:
        return empty
    out = pd.DataFrame(rows).sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)
    for k in strings:
        out[k] = out[k].astype("string")
    return out[columns].astype({c: "float64" for c in columns if c not in strings})
