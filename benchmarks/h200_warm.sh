#!/usr/bin/env bash
# Compile (and check) STAGES on every case of CASES in parallel processes: Triton and TileLang
# compile on one CPU core per process, so a 16-core device machine warms its caches
# (~/.triton/cache, ~/.tilelang/cache) in the time of the slowest unit. The GPU is shared
# meanwhile, so these timings are thrown away; logs and throw-away records go to WORK.
# UNIT "case" (default) runs one process per case with all STAGES; "stage" one process per
# (case, stage), so a stage whose compile outlasts TIMEOUT costs only itself: its exit status
# (124 or 137) is left in WORK/rc/CASE__STAGE for h200_ladder.sh to record it not runnable.
# Stage units skip the golden check (--no-check; the timing process checks every stage once):
# on the H200, eight N128_P64_R8_C8 units each building the fp64 golden ran out of GPU memory,
# so those stages were never compiled here and their timing process compiled them past its
# deadline.
# Stage units start TileLang's compiles first: they are the long pole (~170 s each on the H100's
# host with a few other compiles beside them, past 260-300 s with 21 on 16 cores, where six and
# seven of them timed out in two calls: records/h100-auxdq-vs-tilelang-d57951a.json).
# TileLang's compiles of the official grid take 345-440 s on a fresh machine. TL_CACHE_IN
# (environment): a tar.xz of a TileLang kernel cache (~/.tilelang/cache, as TL_CACHE_OUT packs it),
# unpacked before the compiles, so that the kernels it holds load instead of compiling (TileLang
# keys them by the kernel's source, arguments and target: an H100's cache serves an H200, both
# sm_90). TL_CACHE_OUT: where to pack the cache once the compiles end (a file under $OUT comes
# back from the device tool; carry it in an ignored folder of the repo the next time).
# usage: benchmarks/h200_warm.sh WORK STAGES CASES [timeout_s] [parallel] [unit]
set -u
work=$1; stages=$2; spec=$3; limit=${4:-300}; par=${5:-14}; unit=${6:-case}
t0=$(date +%s)
mkdir -p "$work/rc"
tl_cache=${TILELANG_CACHE_DIR:-$HOME/.tilelang/cache}
if [ -n "${TL_CACHE_IN:-}" ]; then
  if [ -f "$TL_CACHE_IN" ]; then
    mkdir -p "$tl_cache" && tar xJf "$TL_CACHE_IN" -C "$tl_cache" && echo "  TileLang cache from $TL_CACHE_IN: $(ls "$tl_cache" | wc -l) entries"
  else
    echo "  TL_CACHE_IN=$TL_CACHE_IN is not a file: TileLang compiles from scratch"
  fi
fi
nocheck=""; [ "$unit" = stage ] && nocheck=--no-check
# Each unit builds its case's inputs on the CPU (make_inputs: the fp32 forward cache), and torch
# starts as many intra-op threads as the machine has cores: PAR processes of 16 threads each on 16
# cores spin against each other (here, 6 processes on 2 cores: 70 s each at 2 threads, 26 s at 1).
# A device run of 44 units at PAR 22 ended with every unit past its 170 s limit, TileLang's too
# though its kernels came from the cache in 7 s alone (its logs did not come back, so the cause
# there is not seen; oversubscription is the one found here). So each unit gets the cores / PAR share:
# with it the next run's phase of 44 units at PAR 16 took 50 s on an H100 (README, "stage42_precap").
threads=$(( $(nproc) / par )); [ "$threads" -ge 1 ] || threads=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
units=$(python3 -c "
from mamba3_perf.bench import select_cases, select_stages
cases = [c.id for c in select_cases('$spec')]
names, tl = select_stages('$stages')
stages = names + (['tilelang'] if tl else [])
units = [f'{c}__{s}' for s in stages for c in cases if s == 'tilelang']
units += [f'{c}__{s}' for c in cases for s in stages if s != 'tilelang']
print(' '.join(cases if '$unit' == 'case' else units))")
printf '%s\n' $units | xargs -P "$par" -I{} sh -c "u={}; c=\${u%%__*}; s=\${u#*__}; [ \"\$s\" = \"\$u\" ] && s='$stages'; \
  timeout $limit python3 benchmarks/ladder.py --cases \$c --stages \$s --out /tmp/warm-runs --warmup-ms 1 --rep-ms 1 $nocheck \
  --json $work/\$u.json > $work/\$u.log 2>&1; rc=\$?; echo \$rc > $work/rc/\$u; \
  echo \"  warm \$u (\$s) rc=\$rc \$(( \$(date +%s) - $t0 ))s\""
if [ -n "${TL_CACHE_OUT:-}" ] && [ -d "$tl_cache" ]; then
  tmp="$TL_CACHE_OUT.part.$$"
  (set -o pipefail; tar cf - -C "$tl_cache" --exclude=./tmp . | xz -T0 -3 > "$tmp") && mv -f "$tmp" "$TL_CACHE_OUT" \
    && echo "  TileLang cache packed: $TL_CACHE_OUT ($(du -h "$TL_CACHE_OUT" | cut -f1))" || rm -f "$tmp"
fi
