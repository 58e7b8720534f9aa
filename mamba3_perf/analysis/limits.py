"""What bounds each case from below: HBM traffic, matrix FLOPs, and the reverse scan's serial chain.

* ``hbm_roofline_us``  = unique bytes (bwd_bwd inputs read once + outputs written once,
  as ``unique_bytes`` in shared/anchors/measure_tilelang.py) / device HBM bandwidth.
* ``compute_bound_us`` = matmul FLOPs of bwd_bwd (see :data:`MATMULS`) / device matrix FLOP/s.
* ``serial_bound_us``  = nchunks x ``scan_step_latency_us``: the dstates update of chunk c
  needs the result of chunk c+1, so one (b, h) walks nchunks dependent steps whatever the
  parallelism across (b, h).

All three are lower bounds; ``lower_bound_us`` is their maximum and ``bound_by`` names it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np
import pandas as pd

from mamba3_perf.kernels.cases import Case, parse_dtype


@dataclass(frozen=True)
class DeviceSpec:
    """Figures of one device used by the limit and memory models.

    ``sm_count`` is SMs on a GPU and AI (cube) cores on an Ascend NPU. Fields that do not
    apply to a device are 0. ``scan_step_latency_us`` is a model constant, not a
    measurement: the assumed minimum latency of one dependent step of the reverse scan
    (one global-memory round trip plus one mma on the critical path).
    """

    name: str
    kind: str  # "gpu" or "npu"
    hbm_bytes_per_s: float
    fp32_matrix_flops: float
    bf16_matrix_flops: float
    sm_count: int
    smem_per_block_bytes: int = 0
    registers_per_sm: int = 0  # 32-bit registers
    max_registers_per_thread: int = 0
    vector_core_count: int = 0
    ub_bytes: int = 0
    l1_bytes: int = 0
    l0a_bytes: int = 0
    l0b_bytes: int = 0
    l0c_bytes: int = 0
    # residency of programs on one SM (GPU; analysis.occupancy): shared memory of the SM, most
    # warps and blocks, and the allocation rules (registers per warp in units of reg_alloc_unit,
    # shared memory per block in units of smem_alloc_unit plus smem_reserved_per_block)
    smem_per_sm_bytes: int = 0
    max_warps_per_sm: int = 0
    max_blocks_per_sm: int = 0
    reg_alloc_unit: int = 0
    smem_alloc_unit: int = 0
    smem_reserved_per_block: int = 0
    scan_step_latency_us: float = 1.0
    source: str = ""

    def matrix_flops(self, dtype: str) -> float:
        return self.fp32_matrix_flops if parse_dtype(dtype).itemsize == 4 else self.bf16_matrix_flops


# H200: HBM is the measured copy bandwidth of the TileLang anchor (shared/anchors/
# tilelang-h200.json, device.measured_copy_bandwidth_TBps = 4.3; the spec sheet says 4.8 TB/s);
# bf16 mma 7.9e14 FLOP/s is the achievable dense rate from the device notes (spec 989 TFLOP/s);
# fp32 inputs go through TF32 tensor cores at half the bf16 rate (spec 494.7 vs 989.4 dense).
# 132 SMs, 227 KiB shared memory per block (opt-in maximum), 64K 32-bit registers per SM,
# 255 per thread: NVIDIA Hopper tuning guide / CUDA C++ Programming Guide, compute capability 9.0.
# Residency (same sources; the ncu raw pages of records/ncu-stage26-4fc1088/ report the same
# limits, launch__occupancy_limit_*): 228 KiB of shared memory per SM, 1 KiB of it reserved per
# block, allocated in 128-byte units; registers allocated per warp in units of 256; 64 warps and
# 32 blocks per SM.
H200 = DeviceSpec(
    name="NVIDIA H200", kind="gpu",
    hbm_bytes_per_s=4.3e12, fp32_matrix_flops=3.95e14, bf16_matrix_flops=7.9e14,
    sm_count=132, smem_per_block_bytes=227 * 1024, registers_per_sm=65536,
    max_registers_per_thread=255, smem_per_sm_bytes=228 * 1024, max_warps_per_sm=64,
    max_blocks_per_sm=32, reg_alloc_unit=256, smem_alloc_unit=128, smem_reserved_per_block=1024,
    scan_step_latency_us=1.0,
    source="anchor tilelang-h200.json (copy bandwidth); device notes (bf16 mma); CUDA guide cc 9.0",
)

# H100 (SXM5, 80 GB HBM3): the same GH100 SM array as the H200 at the same clocks (132 SMs,
# 1980 MHz, the residency rules above), so the same matrix rates; what differs is the memory:
# 5120-bit HBM3 at 2619 MHz, 3.35 TB/s (spec sheet; nvidia-smi's memory clock in
# records/h100-auxdq-vs-tilelang-d57951a.nvidia-smi.csv). No copy bandwidth was measured on it;
# the ncu pages of records/profile-N128_P64_R4_C16-auxdq-h100-d57951a/ imply a peak of 3.3 TB/s
# (a kernel's DRAM bytes / its time / its dram throughput %), so the spec figure stands.
H100 = replace(
    H200, name="NVIDIA H100", hbm_bytes_per_s=3.35e12,
    source="H100 SXM5 80GB spec (HBM3 3.35 TB/s); matrix rates and residency as the H200 (same GH100 SMs)",
)

# Ascend 910B (Atlas A2 training series, 910B2 figures). Published, not measured here:
# - 24 AI (cube) cores with 2 vector cores each (separated "AIC/AIV" architecture);
#   HBM2e 64 GB at 1.6 TB/s; ~376 TFLOP/s fp16/bf16 cube peak: Huawei Atlas 800T A2 /
#   910B product tables as summarised in public vendor and press material. fp32 cube rate
#   is not published for this part, so it is NaN (compute bounds of fp32 cases are unknown).
# - UB 192 KiB per vector core, L1 512 KiB, L0A 64 KiB, L0B 64 KiB, L0C 128 KiB per AI core:
#   CANN Ascend C docs (hardware constraints of Atlas A2 training products; the sizes are
#   returned by GetCoreMemSize) and the Catlass memory-hierarchy guide for Atlas A2.
# The scan step latency is the same model constant as on the GPU (no better figure).
ASCEND_910B = DeviceSpec(
    name="Ascend 910B", kind="npu",
    hbm_bytes_per_s=1.6e12, fp32_matrix_flops=math.nan, bf16_matrix_flops=3.76e14,
    sm_count=24, vector_core_count=48, ub_bytes=192 * 1024, l1_bytes=512 * 1024,
    l0a_bytes=64 * 1024, l0b_bytes=64 * 1024, l0c_bytes=128 * 1024, scan_step_latency_us=1.0,
    source="Atlas A2 / 910B2 published tables; CANN Ascend C hardware constraints; Catlass docs",
)

DEVICES: tuple[DeviceSpec, ...] = (H200, H100, ASCEND_910B)


def device_for(name: str | None, default: DeviceSpec = H200) -> DeviceSpec:
    """The spec whose device matches a recorded device name (``default`` when none does)."""
    n = (name or "").lower()
    if "h200" in n:
        return H200
    if "h100" in n:
        return H100
    if "910" in n or "ascend" in n or n.startswith("npu"):
        return ASCEND_910B
    return default


def device_among(names, default: DeviceSpec = H200) -> DeviceSpec:
    """The spec of the first of ``names`` (e.g. a trace's device column) that :func:`device_for`
    recognizes; ``default`` when none does (an ncu page names its GPU by index only)."""
    for n in names:
        spec = device_for(None if n is None or pd.isna(n) else str(n), default=None)
        if spec is not None:
            return spec
    return default


# ------------------------------------------------------------------------------ the model

# bwd_bwd matmuls per chunk and (b, h), as (what, (M, K, N)) with dims named in terms of
# CR = C*R, N, P; MACs = M*K*N, FLOPs = 2 * MACs.
MATMULS: tuple[tuple[str, tuple[str, str, str]], ...] = (
    ("k . q^T", ("CR", "CR", "N")),
    ("(lkq) . dPhiO", ("CR", "CR", "P")),
    ("ks . dstates", ("CR", "N", "P")),
    ("PsiV . dPhiO^T", ("CR", "CR", "P")),
    ("PsiV . dstates^T", ("CR", "P", "N")),
    ("dkq . q", ("CR", "CR", "N")),
    ("dPhiO . states^T", ("CR", "P", "N")),
    ("dkq^T . k", ("CR", "CR", "N")),
    ("q^T . dPhiO", ("N", "CR", "P")),
)


def unique_bytes(case: Case, *, states_bytes: int = 2) -> int:
    """Bytes bwd_bwd must move at least once: inputs read and outputs written.

    Follows ``unique_bytes`` of shared/anchors/measure_tilelang.py; ``states_bytes`` is the
    element size the chunk states are stored in (2: bf16, as the anchor counts them).
    """
    B, S, H, G, N, P, R, C = case.B, case.S, case.H, case.G, case.N, case.P, case.R, case.C
    esz = parse_dtype(case.dtype).itemsize
    nc, rd = case.nchunks, case.rd
    ins = (B * S * H * P * esz  # dout
           + 2 * B * S * R * G * N * esz  # q, k
           + B * S * H * P * esz  # v
           + B * H * nc * N * P * states_bytes  # states
           + B * H * S * R * R * esz  # qk_dot
           + 3 * B * H * S * 4 + B * H * S * esz  # da_cs, da_cs_rev, dt (fp32); trap
           + B * H * nc * C * C * 4  # segsum
           + B * S * H * rd * 4)  # angles
    outs = (2 * B * S * R * H * N * esz  # dq, dk
            + B * S * H * P * esz  # dv
            + B * S * H * rd * 4  # dangles
            + 6 * B * H * S * 4  # dfactor, dgamma, ddA, ddA_cs_rev, ddA_cs, (dt-shaped fp32)
            + B * H * nc * C * C * 4)  # dSSdA
    return ins + outs


def chunk_matmul_flops(case: Case) -> dict[str, int]:
    """FLOPs (2 per MAC) of each of :data:`MATMULS` on one chunk of one (b, h)."""
    dims = {"CR": case.C * case.R, "N": case.N, "P": case.P}
    return {what: 2 * dims[m] * dims[k] * dims[n] for what, (m, k, n) in MATMULS}


def matmul_flops(case: Case) -> int:
    """FLOPs of the bwd_bwd matmuls (2 per MAC) over all chunks and (b, h)."""
    return sum(chunk_matmul_flops(case).values()) * case.B * case.H * case.nchunks


def case_limits(case: Case, device: DeviceSpec = H200, *, states_bytes: int = 2) -> dict:
    """The lower bounds of ``case`` on ``device`` (times in µs) and which one binds."""
    ub = unique_bytes(case, states_bytes=states_bytes)
    fl = matmul_flops(case)
    hbm = ub / device.hbm_bytes_per_s * 1e6
    comp = fl / device.matrix_flops(case.dtype) * 1e6
    serial = case.nchunks * device.scan_step_latency_us
    bounds = {"hbm": hbm, "compute": comp, "serial": serial}
    known = {k: v for k, v in bounds.items() if not math.isnan(v)}
    bound_by = max(known, key=known.get)
    return {
        "case_id": case.id, "device": device.name, "nchunks": case.nchunks,
        "unique_bytes": ub, "flops": fl, "states_bytes": states_bytes,
        "hbm_roofline_us": hbm, "compute_bound_us": comp, "serial_bound_us": serial,
        "scan_step_latency_us": device.scan_step_latency_us,
        "lower_bound_us": known[bound_by], "bound_by": bound_by,
    }


def fraction_of_limits(time_us: float, limits: Mapping) -> dict:
    """Each bound as a fraction of a measured time (1.0 = running at that limit)."""
    if not time_us or math.isnan(time_us) or time_us <= 0:
        return {k: math.nan for k in ("hbm", "compute", "serial", "lower_bound")}
    return {
        "hbm": limits["hbm_roofline_us"] / time_us,
        "compute": limits["compute_bound_us"] / time_us,
        "serial": limits["serial_bound_us"] / time_us,
        "lower_bound": limits["lower_bound_us"] / time_us,
    }


LIMIT_COLUMNS = ("hbm_roofline_us", "compute_bound_us", "serial_bound_us", "lower_bound_us",
                 "bound_by", "frac_hbm_roofline", "frac_compute_bound", "frac_serial_bound")


def with_limits(table: pd.DataFrame, cases: Mapping[str, Case], device: DeviceSpec = H200,
                *, states_bytes: int = 2) -> pd.DataFrame:
    """Add :data:`LIMIT_COLUMNS` to a frame with ``case_id`` and ``median_us`` (and ``status``).

    Fractions are bound / median for "ok" rows; cases missing from ``cases`` get NaN.
    """
    lim = {cid: case_limits(c, device, states_bytes=states_bytes) for cid, c in cases.items()}
    out = table.copy()
    for col in ("hbm_roofline_us", "compute_bound_us", "serial_bound_us", "lower_bound_us"):
        out[col] = out["case_id"].map({k: v[col] for k, v in lim.items()}).astype("float64")
    out["bound_by"] = out["case_id"].map({k: v["bound_by"] for k, v in lim.items()}).astype("string")
    t = out["median_us"].astype("float64")
    if "status" in out.columns:
        t = t.where(out["status"] == "ok")
    t = t.where(t > 0)
    out["frac_hbm_roofline"] = out["hbm_roofline_us"] / t
    out["frac_compute_bound"] = out["compute_bound_us"] / t
    out["frac_serial_bound"] = out["serial_bound_us"] / t
    return out.replace({np.inf: np.nan})
