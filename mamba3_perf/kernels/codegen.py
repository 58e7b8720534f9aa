"""Compile a stage's kernels for a GPU target on a machine without one (no kernel runs).

The stage runs on CPU tensors with every Triton launch intercepted, and with the dot
precisions it would choose on CUDA. Two uses:

- ``compile``: each captured launch of a small case of the given N, P, R, C (so the same
  constexprs; bf16, with the benchmarks' cached-state dtype) is compiled with the constexprs and
  launch options the stage gave it, and its TTGIR looked at (``benchmarks/ptxas_stage.py`` adds
  ptxas' register and spill report).
- ``warm``: each launch of a named case at its full size goes through Triton's own JIT path in
  warmup mode against a stand-in sm_90 driver, so the binaries land in the Triton cache under the
  keys a GPU process computes for the same launches (same specializations of strides and sizes).
  Copy the cache directory to the GPU machine and point ``TRITON_CACHE_DIR`` at it: the stages
  start without compiling. The keys include a hash of Triton's own binary, so run this with the
  Python and Triton versions of the GPU machine (the H200 of this project: Python 3.12, Triton 3.6).

Needs real ``triton.jit`` functions, so ``TRITON_INTERPRET`` must be unset (tests run this module
in a subprocess without it).

    python -m mamba3_perf.kernels.codegen compile stage7_streamaux 64 64 4 16   # JSON line per kernel
    python -m mamba3_perf.kernels.codegen compile stage30_stepdesc 128 64 4 16 --kernel aux --banks
    TRITON_CACHE_DIR=/tmp/tc python -m mamba3_perf.kernels.codegen warm N128_P64_R8_C8 stage2_aux,prod
    python -m mamba3_perf.kernels.codegen pack /tmp/tc tcache.tar.xz --at /tmp/tcache
    # on the GPU machine: mkdir -p /tmp/tcache && tar xJf tcache.tar.xz -C /tmp/tcache
    #                     TRITON_CACHE_DIR=/tmp/tcache perf bench ...
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time

SM90 = ("cuda", 90, 32)
_MMA = re.compile(r"nvidia_mma<\{versionMajor = (\d+)[^}]*instrShape = \[([\d, ]+)\]")


class _StandInDriver:
    """What Triton's JIT asks of the active driver before a launch, for a GPU that is not here."""

    def __init__(self, target):
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget(*target)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0


def _run_intercepted(stage: str, case, on_launch) -> int:
    """Run ``stage`` on the CPU inputs of ``case`` with every launch handed to
    ``on_launch(fn, args, kwargs)`` instead of run; returns how many launches there were."""
    from triton.runtime.jit import JITFunction

    from mamba3_perf.bench import prepare
    from mamba3_perf.kernels.bwd_bwd.common import dot_precision, is_hopper
    from mamba3_perf.kernels.checking import run_stage

    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("codegen compiles real triton.jit functions: unset TRITON_INTERPRET")
    launches = []
    original = JITFunction.run

    def intercept(self, *args, grid, warmup, **kw):
        launches.append(self.__name__)
        on_launch(self, args, kw)

    JITFunction.run = intercept
    # the dot precisions each stage chooses on CUDA, and its Hopper-only (Gluon) kernels, though
    # its tensors are on the CPU
    bwd = [m for name, m in sys.modules.items() if name.startswith("mamba3_perf.kernels.bwd_bwd")]
    users = [m for m in bwd if hasattr(m, "dot_precision")]
    hopper = [m for m in bwd if hasattr(m, "is_hopper")]
    for m in users:
        m.dot_precision = lambda device, **kw: dot_precision("cuda", **kw)
    for m in hopper:
        m.is_hopper = lambda device: True
    try:
        run_stage(stage, prepare(case, device="cpu"), case)  # as the benchmarks call it
    except Exception as e:  # outputs of intercepted launches are never written; later host code may fail
        print(f"(stage stopped after {len(launches)} launches: {str(e).splitlines()[0][:120]})",
              file=sys.stderr)
    finally:
        JITFunction.run = original
        for m in users:
            m.dot_precision = dot_precision
        for m in hopper:
            m.is_hopper = is_hopper
    return len(launches)


def capture_launches(stage: str, N: int, P: int, R: int, C: int) -> list:
    """(JITFunction, args, kwargs) of every launch of ``stage`` on a small case; nothing is executed."""
    from mamba3_perf.kernels.cases import Case

    captured = []
    case = Case(id="codegen", B=1, S=4 * C, H=2, G=1, N=N, P=P, R=R, C=C, dtype="bfloat16")
    _run_intercepted(stage, case, lambda fn, args, kw: captured.append((fn, args, kw)))
    return captured


@contextlib.contextmanager
def _stand_in_driver(target):
    """Triton's active driver replaced by a stand-in for a ``target`` GPU inside."""
    from triton.runtime.driver import driver

    before = driver._active  # reset_active() would look for a real GPU driver
    driver.set_active(_StandInDriver(target))
    try:
        yield
    finally:
        driver.set_active(before)


def warm_cache(stage: str, case, *, target=SM90, log=print) -> int:
    """Compile every launch of ``stage`` on ``case`` (full size) into the Triton cache through the
    JIT's warmup path, keyed as on a ``target`` GPU; returns the number of launches."""
    from triton.runtime.jit import JITFunction

    run = JITFunction.run

    def compile_one(fn, args, kw):
        t0 = time.time()
        run(fn, *args, grid=(1,), warmup=True, **kw)
        log(f"{case.id} {stage} {fn.__name__}: {time.time() - t0:.1f} s")

    with _stand_in_driver(target):
        return _run_intercepted(stage, case, compile_one)


def compile_launch(fn, args: tuple, kwargs: dict, *, target=SM90, prec: str | None = None,
                   warps: int | None = None, stages: int | None = None, maxnreg: int | None = None):
    """Compile one captured launch through Triton's own JIT path in warmup mode against a
    stand-in ``target`` driver (PREC / num_warps / num_stages / the register cap maxnreg
    optionally overridden): the binary a GPU process builds for that launch, with the same
    specializations of its integer and pointer arguments (divisibility by 16, which decides
    vector widths). Returns (compiled kernel, launch options)."""
    from triton.runtime.jit import JITFunction

    kwargs = dict(kwargs)
    opts = dict(num_warps=kwargs.pop("num_warps", 4), num_stages=kwargs.pop("num_stages", 3),
                maxnreg=kwargs.pop("maxnreg", None))
    if warps:
        opts["num_warps"] = warps
    if stages:
        opts["num_stages"] = stages
    if maxnreg:
        opts["maxnreg"] = maxnreg
    if prec and "PREC" in kwargs:
        kwargs["PREC"] = prec
    with _stand_in_driver(target):
        kernel = JITFunction.run(fn, *args, grid=(1,), warmup=True, **kwargs,
                                 **{k: v for k, v in opts.items() if v is not None})
    return kernel, opts


def mma_shapes(ttgir: str) -> list[dict]:
    """The MMA encodings of a TTGIR module: version (3 = Hopper wgmma) and instruction shape."""
    return [{"version": int(v), "instr": [int(x) for x in s.split(",")]} for v, s in _MMA.findall(ttgir)]


def tma_ring(ttgir: str) -> dict:
    """A TMA ring's issue points in a TTGIR module: its mbarriers (``barriers``) and the
    expect-tx of each block's copies before the module's first loop (``filled``: the blocks the
    prologue issues) and from it on (``in_loop``). A walk that issues step j + SLOTS's copies into
    step j's slot must fill every slot first (``filled == barriers``), or its wait for the first
    unissued block never ends (terms_gluon's PIPE hung so on an H100)."""
    head, _, rest = ttgir.partition("scf.for")
    return {"barriers": ttgir.count("ttng.init_barrier"), "filled": head.count("ttng.barrier_expect"),
            "in_loop": rest.count("ttng.barrier_expect")}


IR_SUFFIXES = (".ttir", ".ttgir", ".llir", ".ptx", ".source", ".amdgcn")  # not needed to launch


def pack_cache(cache_dir: str, out: str, *, at: str) -> int:
    """Write the Triton cache ``cache_dir`` as a tar.xz to unpack at the absolute path ``at`` on
    the GPU machine: each kernel's metadata and binary only (no IR text), its group file
    rewritten to point there (Triton's group files hold absolute paths). Returns the number of
    kernels; ``out`` appears complete or not at all."""
    import shutil
    import tarfile
    import tempfile
    from pathlib import Path

    src, n = Path(cache_dir), 0
    with tempfile.TemporaryDirectory() as tmp:
        for grp in sorted(src.glob("*/__grp__*.json")):
            key = grp.parent.name
            children = json.loads(grp.read_text()).get("child_paths") or {}
            keep = {c: p for c, p in children.items() if not c.endswith(IR_SUFFIXES)}
            if not all(Path(p).is_file() for p in keep.values()):
                continue  # an entry another process was still writing
            (Path(tmp) / key).mkdir(exist_ok=True)
            for c, p in keep.items():
                shutil.copyfile(p, Path(tmp) / key / c)
            moved = {c: f"{at.rstrip('/')}/{key}/{c}" for c in keep}
            (Path(tmp) / key / grp.name).write_text(json.dumps({"child_paths": moved}))
            n += 1
        part = f"{out}.part"
        with tarfile.open(part, "w:xz") as t:
            t.add(tmp, arcname=".")
        os.replace(part, out)
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="compile a small case's launches, one JSON line per kernel")
    for dim in ("stage", "N", "P", "R", "C"):
        c.add_argument(dim, type=str if dim == "stage" else int)
    c.add_argument("--kernel", default=None, help="compile only the kernels whose name contains this")
    c.add_argument("--banks", action="store_true",
                   help="add each Gluon kernel's register <-> shared copies and their shared-memory "
                        "wavefronts (mamba3_perf.analysis.banks.summary) to its line")
    w = sub.add_parser("warm", help="fill TRITON_CACHE_DIR with a GPU's binaries of cases at full size")
    w.add_argument("cases", help="case ids or sets, comma-separated (as perf bench --cases)")
    w.add_argument("stages", help="stages, comma-separated")
    for p in (c, w):
        p.add_argument("--knob", action="append", default=[], metavar="MODULE.ATTR=v",
                       help="set a kernels knob (kernels.knobs) for this compile; repeatable")
    k = sub.add_parser("pack", help="tar a Triton cache's binaries for unpacking at an absolute path "
                                    "on the GPU machine (point TRITON_CACHE_DIR there)")
    k.add_argument("cache_dir")
    k.add_argument("out", help="the .tar.xz to write")
    k.add_argument("--at", required=True, help="absolute path the archive will be unpacked at")
    a = ap.parse_args(argv)
    if a.cmd == "pack":
        print(f"{pack_cache(a.cache_dir, a.out, at=a.at)} kernels -> {a.out}")
        return
    from mamba3_perf.kernels.knobs import single_knobs

    try:
        knobs = single_knobs(a.knob)
    except ValueError as e:
        ap.error(str(e))
    with knobs:
        _compile_or_warm(a)


def _compile_or_warm(a) -> None:
    from mamba3_perf.analysis.occupancy import occupancy

    if a.cmd == "warm":
        from mamba3_perf.bench import select_cases

        for case in select_cases(a.cases):
            for stage in a.stages.split(","):
                warm_cache(stage, case, log=lambda line: print(line, flush=True))
        return
    for fn, args, kwargs in capture_launches(a.stage, a.N, a.P, a.R, a.C):
        if a.kernel and a.kernel not in fn.__name__:
            continue
        t0 = time.time()
        extra = {}
        if a.banks:
            from mamba3_perf.analysis.banks import BANK_FIELDS, compile_with_accesses, summary

            k, opts, accesses = compile_with_accesses(fn, args, kwargs)
            extra["banks"] = json.loads(summary(accesses)[list(BANK_FIELDS)].to_json(orient="records"))
        else:
            k, opts = compile_launch(fn, args, kwargs)
        consts = {n: v for n, v in kwargs.items() if isinstance(v, (bool, int, float, str))}
        # programs of this kernel that one H200 SM's shared memory holds (analysis.occupancy's
        # rule; the registers, which ptxas reports, may allow fewer)
        by_shared = occupancy(0, 32 * opts["num_warps"], k.metadata.shared).limits["shared_mem"]
        print(json.dumps({"kernel": fn.__name__, **opts, "shared": k.metadata.shared,
                          "programs_per_sm_by_shared": by_shared,
                          "mma": mma_shapes(k.asm["ttgir"]), "ring": tma_ring(k.asm["ttgir"]),
                          "keywords": consts, **extra,
                          "seconds": round(time.time() - t0, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
