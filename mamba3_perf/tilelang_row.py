"""The live ``tilelang`` row: upstream's GPU TileLang ``mamba_mimo_bwd_bwd`` on our inputs.

Only on CUDA with ``tilelang`` (0.1.8) and the upstream ``mamba_ssm`` TileLang mamba3 files
importable (see shared/docs/tilelang-on-device.md). The launch follows the anchor script
shared/anchors/measure_tilelang.py (``bargs``): states in bf16, qk_dot in the input dtype,
DQ/DK allocated as [B,S,R,H,N] and passed as [B,S*R,H,N] views, no Z (None for Z, MIMO_Z).

Accumulated outputs (DANGLES, DFACTOR, ...) start at zero like the anchor's; only the first
launch's outputs are meaningful, so :meth:`TileLangRunner.outputs_as_dict` is read before
timing. Upstream computes parts in bf16, so it may fail our fp32-level golden criterion.
"""
from __future__ import annotations

import importlib

import torch

from mamba3_perf.kernels.cases import Case, dtype_name

BWD_MODULE = "mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd"
UNAVAILABLE = ("tilelang not available here (needs CUDA, tilelang and "
               f"{BWD_MODULE} importable; see docs/tilelang-on-device.md)")


def available() -> bool:
    """True when CUDA is present and ``tilelang`` and upstream's bwd module import."""
    if not torch.cuda.is_available():
        return False
    for mod in ("tilelang", BWD_MODULE):
        try:
            importlib.import_module(mod)
        except Exception:  # a broken install (e.g. a tvm-ffi mismatch) is "not available"
            return False
    return True


def threads_for(case: Case) -> int:
    """Threads per block of the bwd_bwd kernel, as the anchor script picks them."""
    return 128 if case.N <= 16 else 256


def compile_kernel(case: Case):
    """Upstream's bwd_bwd compiled for ``case`` (TileLang caches it on disk; nothing runs)."""
    bwd = importlib.import_module(BWD_MODULE)
    return bwd.mamba_mimo_bwd_bwd(
        case.B, case.S, case.H, case.G, case.N, case.P, case.R, False, case.has_d, case.reduce_o,
        False, case.C, case.rotary_dim_divisor, dtype_name(case.torch_dtype), threads_for(case), 0,
        states_dtype=torch.bfloat16)


class TileLangRunner:
    """Calling it launches upstream's compiled bwd_bwd once on the bound inputs."""

    def __init__(self, case: Case, x: dict):
        B, S, H, N, P, R, C = case.B, case.S, case.H, case.N, case.P, case.R, case.C
        dt_, dev = case.torch_dtype, x["q"].device
        f = torch.float32
        nc = case.nchunks
        self.kernel = compile_kernel(case)
        self.dq = torch.zeros(B, S, R, H, N, dtype=dt_, device=dev)  # [B,S,R,H,N]
        self.dk = torch.zeros(B, S, R, H, N, dtype=dt_, device=dev)
        o = dict(
            DV=torch.zeros_like(x["v"]),  # [B,S,H,P]
            DMIMO_V=torch.zeros(B, H, R, P, dtype=f, device=dev),  # per batch, as ours
            DANGLES=torch.zeros(B, S, H, case.rd, dtype=f, device=dev),
            DFACTOR=torch.zeros(B, H, S, dtype=f, device=dev),
            DGAMMA=torch.zeros(B, H, S, dtype=f, device=dev),
            DDA=torch.zeros(B, H, S, dtype=f, device=dev),
            DSSDA=torch.zeros(B, H, nc, C, C, dtype=f, device=dev),
            DDA_CS_REV=torch.zeros(B, H, S, dtype=f, device=dev),
            DDA_CS=torch.zeros(B, H, S, dtype=f, device=dev),
            DD=torch.zeros(B, H, dtype=f, device=dev) if case.has_d else None,
        )
        self.out = o
        states = x["states"].to(torch.bfloat16).contiguous()  # [B,H,nc,N,P]
        qk_dot = x["qk_dot"].to(dt_).contiguous()  # [B,H,S,R,R]
        self.args = (
            x["dout"], x["q"], x["k"], x["v"], x["q_bias"], x["k_bias"], x["mimo_v"], x["mimo_o"],
            self.dk.view(B, S * R, H, N), o["DV"], o["DMIMO_V"], states,
            self.dq.view(B, S * R, H, N), None, None,  # Z, MIMO_Z: upstream's bwd_bwd needs none
            x["angles"], x["da_cs"], x["da_cs_rev"], x["dt"], x["trap"],
            o["DFACTOR"], o["DGAMMA"], o["DANGLES"], x["d"], o["DD"], qk_dot,
            o["DDA"], o["DSSDA"], o["DDA_CS_REV"], o["DDA_CS"], x["segsum"],
        )

    def __call__(self) -> None:
        self.kernel(*self.args)

    def outputs_as_dict(self) -> dict:
        """The 12 gradients under our names (DQ/DK as [B,S*R,H,N], like ours)."""
        B, S, R, H, N = self.dq.shape
        return {"DQ": self.dq.view(B, S * R, H, N), "DK": self.dk.view(B, S * R, H, N), **self.out}


def make_runner(case: Case, inputs: dict) -> TileLangRunner:
    """Compile upstream's bwd_bwd for ``case`` (cached on disk by TileLang) and bind ``inputs``."""
    return TileLangRunner(case, inputs)
