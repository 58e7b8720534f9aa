"""Compile every kernel one stage launches for sm_90 on a machine without a GPU, and print what
ptxas reports per kernel: shared memory, registers per thread, spill bytes, compile seconds.

    python benchmarks/ptxas_stage.py prod 64 64 4 16            # STAGE N P R C
    python benchmarks/ptxas_stage.py stage0 32 64 4 16 --prec ieee --warps 4

The stage runs on small CPU tensors of the same N, P, R, C (so the same constexprs; bf16, with
the benchmarks' cached-state dtype) with every Triton launch captured instead of run, and with
the dot precisions it would choose on CUDA; each captured kernel is then compiled with the
constexprs and launch options the stage gave it (the dot precision defaults to the CUDA one).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.pop("TRITON_INTERPRET", None)  # real JITFunctions: their launches are captured below

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

POINTER = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16"}


def capture_launches(stage: str, N: int, P: int, R: int, C: int) -> list:
    """(JITFunction, args, kwargs) of every launch of ``stage``; nothing is executed."""
    from mamba3_perf.bench import prepare
    from mamba3_perf.kernels import mamba3_mimo_bwd_bwd
    from mamba3_perf.kernels.bwd_bwd.common import dot_precision
    from mamba3_perf.kernels.cases import Case

    captured = []
    original = JITFunction.run
    JITFunction.run = lambda self, *args, grid, warmup, **kw: captured.append((self, args, kw))
    # the dot precisions each stage chooses on CUDA, though its tensors are on the CPU
    users = [m for name, m in sys.modules.items()
             if name.startswith("mamba3_perf.kernels.bwd_bwd") and hasattr(m, "dot_precision")]
    for m in users:
        m.dot_precision = lambda device, *, low=False: dot_precision("cuda", low=low)
    try:
        case = Case(id="ptxas", B=1, S=4 * C, H=2, G=1, N=N, P=P, R=R, C=C, dtype="bfloat16")
        mamba3_mimo_bwd_bwd(**prepare(case, device="cpu"), chunk_size=C, stage=stage)
    except Exception as e:  # outputs of captured launches are never written; later host code may fail
        print(f"(stage stopped after {len(captured)} launches: {str(e).splitlines()[0][:120]})")
    finally:
        JITFunction.run = original
        for m in users:
            m.dot_precision = dot_precision
    return captured


def ptxas_report(fn: JITFunction, args: tuple, kwargs: dict, *, prec: str, warps: int | None) -> str:
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
            sig[name] = POINTER[v.dtype]
        elif name in kwargs:
            sig[name], consts[(i,)] = "constexpr", v
        else:
            sig[name] = "i32"
    t0 = time.time()
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts),
                       target=GPUTarget("cuda", 90, 32), options=opts)
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    for exe in ("ptxas", "ptxas-blackwell"):  # the PTX may need the newer of the two bundled
        res = subprocess.run([os.path.join(bindir, exe), "-arch=sm_90a", "-v", f.name, "-o", os.devnull],
                             capture_output=True, text=True)
        if res.returncode == 0:
            break
    os.unlink(f.name)
    if res.returncode != 0:
        raise RuntimeError(f"ptxas failed on {fn.__name__}: {res.stderr.strip()[-300:]}")
    info = " | ".join(line.split("ptxas info    :")[-1].strip() for line in res.stderr.splitlines()
                      if "Used" in line or "spill" in line)
    return (f"{fn.__name__:30s} warps={opts['num_warps']} stages={opts['num_stages']} "
            f"smem={k.metadata.shared} B {time.time() - t0:.0f}s | {info}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage")
    ap.add_argument("N", type=int)
    ap.add_argument("P", type=int)
    ap.add_argument("R", type=int)
    ap.add_argument("C", type=int)
    ap.add_argument("--prec", default=None,
                    help="override the dots' input precision PREC (default: the stage's CUDA choice)")
    ap.add_argument("--warps", type=int, default=None, help="override every kernel's num_warps")
    a = ap.parse_args(argv)
    for fn, args, kwargs in capture_launches(a.stage, a.N, a.P, a.R, a.C):
        print(ptxas_report(fn, args, kwargs, prec=a.prec, warps=a.warps), flush=True)


if __name__ == "__main__":
    main()
