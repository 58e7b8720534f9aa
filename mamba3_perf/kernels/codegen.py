"""Compile a stage's kernels for a GPU target on a machine without one (no kernel runs).

The stage runs on small CPU tensors of the given N, P, R, C (so the same constexprs; bf16, with
the benchmarks' cached-state dtype) with every Triton launch captured instead of run, and with
the dot precisions it would choose on CUDA; each captured kernel is then compiled with the
constexprs and launch options the stage gave it. Needs real ``triton.jit`` functions, so
``TRITON_INTERPRET`` must be unset (tests run this module in a subprocess without it).
``benchmarks/ptxas_stage.py`` adds ptxas' register and spill report.

    python -m mamba3_perf.kernels.codegen stage7_streamaux 64 64 4 16   # JSON line per kernel
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

POINTER = {"torch.float32": "*fp32", "torch.bfloat16": "*bf16", "torch.float16": "*fp16"}
SM90 = ("cuda", 90, 32)
_MMA = re.compile(r"nvidia_mma<\{versionMajor = (\d+)[^}]*instrShape = \[([\d, ]+)\]")


def capture_launches(stage: str, N: int, P: int, R: int, C: int) -> list:
    """(JITFunction, args, kwargs) of every launch of ``stage``; nothing is executed."""
    from triton.runtime.jit import JITFunction

    from mamba3_perf.bench import prepare
    from mamba3_perf.kernels import mamba3_mimo_bwd_bwd
    from mamba3_perf.kernels.bwd_bwd.common import dot_precision
    from mamba3_perf.kernels.cases import Case

    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("codegen compiles real triton.jit functions: unset TRITON_INTERPRET")
    captured = []
    original = JITFunction.run
    JITFunction.run = lambda self, *args, grid, warmup, **kw: captured.append((self, args, kw))
    # the dot precisions each stage chooses on CUDA, though its tensors are on the CPU
    users = [m for name, m in sys.modules.items()
             if name.startswith("mamba3_perf.kernels.bwd_bwd") and hasattr(m, "dot_precision")]
    for m in users:
        m.dot_precision = lambda device, *, low=False: dot_precision("cuda", low=low)
    try:
        case = Case(id="codegen", B=1, S=4 * C, H=2, G=1, N=N, P=P, R=R, C=C, dtype="bfloat16")
        mamba3_mimo_bwd_bwd(**prepare(case, device="cpu"), chunk_size=C, stage=stage)
    except Exception as e:  # outputs of captured launches are never written; later host code may fail
        print(f"(stage stopped after {len(captured)} launches: {str(e).splitlines()[0][:120]})",
              file=sys.stderr)
    finally:
        JITFunction.run = original
        for m in users:
            m.dot_precision = dot_precision
    return captured


def compile_launch(fn, args: tuple, kwargs: dict, *, target=SM90, prec: str | None = None,
                   warps: int | None = None):
    """triton.compile of one captured launch (PREC / num_warps optionally overridden)."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kwargs = dict(kwargs)
    opts = dict(num_warps=kwargs.pop("num_warps", 4), num_stages=kwargs.pop("num_stages", 3))
    if warps:
        opts["num_warps"] = warps
    if prec and "PREC" in kwargs:
        kwargs["PREC"] = prec
    values = {**dict(zip(fn.arg_names, args)), **kwargs}
    sig, consts = {}, {}
    for i, name in enumerate(fn.arg_names):
        v = values[name]
        if isinstance(v, torch.Tensor):
            sig[name] = POINTER[str(v.dtype)]
        elif name in kwargs:
            sig[name], consts[(i,)] = "constexpr", v
        else:
            sig[name] = "i32"
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                          target=GPUTarget(*target), options=opts), opts


def mma_shapes(ttgir: str) -> list[dict]:
    """The MMA encodings of a TTGIR module: version (3 = Hopper wgmma) and instruction shape."""
    return [{"version": int(v), "instr": [int(x) for x in s.split(",")]} for v, s in _MMA.findall(ttgir)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for dim in ("stage", "N", "P", "R", "C"):
        ap.add_argument(dim, type=str if dim == "stage" else int)
    ap.add_argument("--kernel", default=None, help="compile only the kernels whose name contains this")
    a = ap.parse_args(argv)
    for fn, args, kwargs in capture_launches(a.stage, a.N, a.P, a.R, a.C):
        if a.kernel and a.kernel not in fn.__name__:
            continue
        t0 = time.time()
        k, opts = compile_launch(fn, args, kwargs)
        print(json.dumps({"kernel": fn.__name__, **opts, "shared": k.metadata.shared,
                          "mma": mma_shapes(k.asm["ttgir"]), "seconds": round(time.time() - t0, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
