#!/usr/bin/env bash
# Build the folder a device call carries to run upstream's TileLang kernel (the `tilelang` row),
# as shared/docs/tilelang-on-device.md describes, small enough to travel beside the repo (a call
# carries 64 MiB in all, the tracked tree included: the four wheels unpacked and packed whole are
# 45 MB, which with the tree went over):
#   DEST/site.tar.xz  tilelang 0.1.8, apache-tvm-ffi 0.1.9, z3-solver 4.15.4.0 and torch-c-dlpack-ext
#                     for the device's Python 3.12, unpacked and packed without what the bwd_bwd
#                     kernel never loads (AMD's composable_kernel headers, z3's CLI binary and C
#                     headers, the second copy of libz3: a link instead): about 31 MB
#   DEST/mamba_ssm/   the four upstream files the kernel imports, copied from MIRROR (a checkout of
#                     state-spaces/mamba, e.g. the search tool's fetch), under empty __init__.py
#                     files (upstream's own import CUDA extensions that are not built there)
# Nothing of upstream is committed: DEST must be a folder git ignores (.upstream/ is).
# On the device: mkdir -p /tmp/site && tar xJf DEST/site.tar.xz -C /tmp/site &&
#   export PYTHONPATH=/tmp/site:$PWD/DEST:$PWD
# usage: benchmarks/upstream_kit.sh MIRROR [DEST]   (MIRROR: a git directory or work tree)
set -euo pipefail
mirror=$1; dest=${2:-.upstream}
mkdir -p "$dest"
files="mamba_ssm/ops/tilelang/mamba3/mamba3_mimo_bwd.py mamba_ssm/ops/tilelang/mamba3/mamba3_mimo_fwd.py
mamba_ssm/ops/triton/mamba3/mamba3_mimo_utils.py mamba_ssm/ops/triton/mamba3/grouped_head_reduction.py"
for f in $files; do
  mkdir -p "$dest/$(dirname "$f")"
  git -C "$mirror" show "HEAD:$f" > "$dest/$f.part" && mv "$dest/$f.part" "$dest/$f"
  d=$(dirname "$f")
  while [ "$d" != . ]; do : > "$dest/$d/__init__.py"; d=$(dirname "$d"); done
done
echo "upstream files from $mirror at $(git -C "$mirror" rev-parse --short HEAD) -> $dest/mamba_ssm"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$work/whl" \
  tilelang==0.1.8 apache-tvm-ffi==0.1.9 z3-solver==4.15.4.0 torch-c-dlpack-ext
mkdir "$work/site"
for w in "$work"/whl/*.whl; do unzip -q -o "$w" -d "$work/site"; done  # unzip keeps the mtimes: TileLang's cache keys hold libtilelang.so's
rm -rf "$work"/site/z3_solver-*.data "$work/site/tilelang/3rdparty/composable_kernel" "$work/site/z3/include"
(cd "$work/site/z3/lib" && [ -f libz3.so ] && [ -f libz3.so.4.15 ] && rm libz3.so && ln -s libz3.so.4.15 libz3.so)
tar cf - -C "$work/site" . | xz -T0 -6 > "$dest/site.tar.xz.part" && mv "$dest/site.tar.xz.part" "$dest/site.tar.xz"
echo "packed $dest/site.tar.xz ($(du -h "$dest/site.tar.xz" | cut -f1))"
