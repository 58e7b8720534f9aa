#!/usr/bin/env bash
# Compile (and check) STAGES on every case of CASES, one process per case, in parallel: Triton
# and TileLang compile on one CPU core per process, so a 16-core device machine warms its
# caches (~/.triton/cache, ~/.tilelang/cache) in the time of the slowest case. The GPU is
# shared meanwhile, so these timings are thrown away; logs and throw-away records go to WORK.
# usage: benchmarks/h200_warm.sh WORK STAGES CASES [timeout_s] [parallel]
set -u
work=$1; stages=$2; spec=$3; limit=${4:-300}; par=${5:-14}
t0=$(date +%s)
mkdir -p "$work"
cases=$(python3 -c "from mamba3_perf.bench import select_cases; print(' '.join(c.id for c in select_cases('$spec')))")
printf '%s\n' $cases | xargs -P "$par" -I{} sh -c "timeout $limit python3 benchmarks/ladder.py --cases {} \
  --stages $stages --out /tmp/warm-runs --warmup-ms 1 --rep-ms 1 --json $work/{}.json \
  > $work/{}.log 2>&1; echo \"  warm {} ($stages) rc=\$? \$(( \$(date +%s) - $t0 ))s\""
