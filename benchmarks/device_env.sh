# Source at the start of a device call, in the repo's root, before h200_ladder.sh or ladder.py:
#   source benchmarks/device_env.sh && bash benchmarks/h200_ladder.sh /tmp/run 300 575 official STAGES,tilelang 1 16 stage
# with `carry: [".upstream", ".scratch"]` (both ignored by git):
# - .upstream/ as benchmarks/upstream_kit.sh builds it: site.tar.xz is unpacked into /tmp/site and
#   put on PYTHONPATH with upstream's mamba_ssm tree and the repo (the TileLang row; without it the
#   row is recorded not runnable and the stages run as ever);
# - .scratch/tlcache.tar.xz, if there, as benchmarks/tilelang_warm.py packs it: unpacked into
#   TileLang's cache here (so TL_CACHE_IN is left unset: h200_warm.sh would unpack it again) and
#   probed once: TL_CACHE_HIT=1 where one case's TileLang kernel loads within 40 s, 0 where it
#   compiled (then give the compile phase TileLang's 345-440 s).
# Writes the GPU's name, driver and clocks to $OUT/nvidia-smi.csv (a record's .nvidia-smi.csv) and
# prints the versions that go beside every time.
export PYTHONUNBUFFERED=1
if [ -f .upstream/site.tar.xz ]; then
  mkdir -p /tmp/site && tar xJf .upstream/site.tar.xz -C /tmp/site \
    && export PYTHONPATH=/tmp/site:$PWD/.upstream:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  echo "device_env: no .upstream/site.tar.xz (benchmarks/upstream_kit.sh): no TileLang row"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv > "${OUT:-/tmp}/nvidia-smi.csv" && cat "${OUT:-/tmp}/nvidia-smi.csv"
fi
# ijson (the trace parsers', so sweep_knob.py's per-kernel times'): the device's Python has none
# and nothing there can install one; .scratch/pylib may carry a copy of the package (cp -r of a local
# install: its C backend does not load under another Python, its pure-Python one does)
if ! python3 -c "import ijson" 2>/dev/null && [ -d .scratch/pylib/ijson ]; then
  export PYTHONPATH=$PYTHONPATH:$PWD/.scratch/pylib
fi
python3 -c "import sys, torch, triton; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
TL_CACHE_HIT=0
if [ -f .scratch/tlcache.tar.xz ]; then
  mkdir -p "${TILELANG_CACHE_DIR:-$HOME/.tilelang/cache}" \
    && tar xJf .scratch/tlcache.tar.xz -C "${TILELANG_CACHE_DIR:-$HOME/.tilelang/cache}"
  if timeout 40 python3 -c "
from mamba3_perf import tilelang_row
from mamba3_perf.bench import select_cases
tilelang_row.compile_kernel(select_cases('N16_P64_R4_C8')[0])" >/dev/null 2>&1; then
    TL_CACHE_HIT=1
  fi
  echo "device_env: TileLang cache .scratch/tlcache.tar.xz unpacked: hit=$TL_CACHE_HIT"
fi
export TL_CACHE_HIT
