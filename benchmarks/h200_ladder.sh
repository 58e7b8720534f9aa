#!/usr/bin/env bash
# The H200 ladder record: every stage on the official and regular cases, checked against the
# fp64 golden and timed. One 10-minute device call:
#   phase 1 compiles and checks every case in its own process, in parallel (Triton compiles on
#           one CPU core per process; the GPU is shared, so phase-1 timings are thrown away);
#   phase 2 times the cases one after another on the warm Triton cache, one process per case,
#           each writing its own record (a case cut off by the deadline is listed as skipped).
# benchmarks/merge_records.py then joins the per-case records into records/h200-ladder.json.
# usage: benchmarks/h200_ladder.sh WORKDIR [phase1_s] [deadline_s] [cases]
set -u
work=$1; phase1=${2:-300}; deadline=${3:-540}; spec=${4:-official,regular}
t0=$(date +%s)
cases=$(python3 -c "from mamba3_perf.bench import select_cases; print(' '.join(c.id for c in select_cases('$spec')))")
mkdir -p "$work/warm" "$work/cases"
echo "phase 1: $cases"
printf '%s\n' $cases | xargs -P 10 -I{} sh -c "timeout $phase1 python3 benchmarks/ladder.py --cases {} \
  --stages all --out /tmp/ladder-warm --warmup-ms 1 --rep-ms 1 --json $work/warm/{}.json \
  > $work/warm/{}.log 2>&1; echo \"  warm {} rc=\$? \$(( \$(date +%s) - $t0 ))s\""
echo "phase 2"
for c in $cases; do
  left=$(( deadline - ($(date +%s) - t0) ))
  if [ "$left" -lt 15 ]; then echo "  skipped $c: deadline"; continue; fi
  timeout "$left" python3 benchmarks/ladder.py --cases "$c" --stages all --out /tmp/ladder-runs \
    --warmup-ms 10 --rep-ms 60 --json "$work/cases/$c.json" > "$work/cases/$c.log" 2>&1
  echo "  timed $c rc=$? $(( $(date +%s) - t0 ))s"
done
