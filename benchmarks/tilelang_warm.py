"""Compile upstream TileLang's bwd_bwd for CASES on a machine without a GPU, into a TileLang
kernel cache packed the way ``benchmarks/h200_warm.sh`` unpacks it (``TL_CACHE_IN``), so that a
device call loads the kernels instead of compiling them (345-440 s for the official grid on a
fresh device machine; about 55 s a case here, one core each).

    PYTHONPATH=<tilelang 0.1.8 for this Python>:<upstream mamba_ssm tree> \\
        python benchmarks/tilelang_warm.py official --out .scratch/tlcache.tar.xz -j 2

(TileLang for this Python: the wheels benchmarks/upstream_kit.sh unpacks, with apache-tvm-ffi
0.1.9 and torch-c-dlpack-ext built for it where it is not the device's 3.12; upstream's tree as
that script copies it.) On an H100, 2026-12-07, a kernel built so loaded in 7 s
(records/h100-warm-timeouts-b18f74c.txt).

TileLang keys a kernel by its TIR, its arguments, the target's string, the execution backend, its
pass configs, its version and libtilelang.so's size and mtime (tilelang/cache/kernel_cache.py):
nothing of the machine beyond the target. On the device the target is derived from the GPU
(``cuda -arch=sm_90a`` on an H100 or H200); here it is set through ``TILELANG_TARGET`` before
TileLang is imported, so the keys are the device's. The libtilelang.so must be the same file
(the same wheel, unpacked keeping its mtime), and nvcc must be here (the device binary is built
here). The pack is written atomically.
"""
from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path


def _compile(case_id: str) -> tuple[str, float]:
    from mamba3_perf import tilelang_row
    from mamba3_perf.bench import select_cases
    t0 = time.time()
    tilelang_row.compile_kernel(select_cases(case_id)[0])
    return case_id, time.time() - t0


def pack(cache_dir: Path, out: Path) -> Path:
    """``cache_dir`` (less its ``tmp``) as a tar.xz at ``out``, written atomically (a few MB)."""
    from mamba3_perf.runs import write_bytes_atomic
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", preset=3) as tar:
        for entry in sorted(cache_dir.iterdir()):
            if entry.name != "tmp":
                tar.add(entry, arcname=f"./{entry.name}")
    return write_bytes_atomic(out, buf.getvalue())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", help="a case spec, as select_cases takes it (e.g. official)")
    ap.add_argument("--out", required=True, type=Path, help="the tar.xz to write")
    ap.add_argument("--target", default="cuda -arch=sm_90a",
                    help="TileLang's target string on the device (H100 / H200: the default)")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="TileLang's cache directory (default: a new temporary one)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args(argv)
    from mamba3_perf.bench import select_cases
    case_ids = [c.id for c in select_cases(a.cases)]
    cache = a.cache_dir or Path(tempfile.mkdtemp(prefix="tlcache-"))
    os.environ["TILELANG_TARGET"] = a.target  # read when tilelang is imported, in the workers
    os.environ["TILELANG_CACHE_DIR"] = str(cache)
    if subprocess.run([sys.executable, "-c", "import tilelang, mamba_ssm.ops.tilelang.mamba3.mamba3_mimo_bwd"],
                      capture_output=True).returncode:
        raise SystemExit("tilelang or upstream's mamba_ssm TileLang files do not import here: "
                         "put both on PYTHONPATH (shared/docs/tilelang-on-device.md)")
    failed = []
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        futures = {pool.submit(_compile, c): c for c in case_ids}
        for n, fut in enumerate(as_completed(futures), 1):
            try:
                case_id, secs = fut.result()
                print(f"[{n}/{len(case_ids)}] {case_id}: {secs:.0f} s", flush=True)
            except Exception as e:  # one case's compile error should not lose the others
                failed.append(futures[fut])
                print(f"[{n}/{len(case_ids)}] {futures[fut]}: failed: {e}", flush=True)
    if failed:
        raise SystemExit(f"TileLang did not compile {', '.join(failed)}; nothing packed")
    print(f"packed {pack(cache, a.out)} ({a.out.stat().st_size / 1e6:.1f} MB, {len(case_ids)} cases, "
          f"target {a.target!r})")


if __name__ == "__main__":
    main()
