#!/usr/bin/env bash
# The H200 ladder record: every stage on the official and regular cases, checked against the
# fp64 golden and timed, in one 10-minute device call: h200_warm.sh compiles every case in
# parallel, then the cases are timed one after another on the warm caches, one process per
# case, each writing its own record (a case cut off by the deadline is reported as skipped).
# benchmarks/merge_records.py joins the per-case records into records/h200-ladder.json.
# With unit "stage" the compile phase runs one process per (case, stage); a stage whose compile
# outlasted phase1_s, or whose compile and first run failed, is then recorded "not runnable" in
# its case's record with the reason (ladder.py --skip), not run in the timing process.
# usage: benchmarks/h200_ladder.sh WORK [phase1_s] [deadline_s] [cases] [stages] [rounds] [parallel] [unit]
# e.g. the prod-vs-TileLang record: h200_ladder.sh W 250 430 official,regular prod,stage6_statepass,tilelang 3 7
# LADDER_FLAGS (environment): more benchmarks/ladder.py flags for the timing phase, e.g.
# LADDER_FLAGS=--cuda-graph to time CUDA-graph replays (device time without the host's launches).
# Put WORK outside $OUT: the device tool brings back only a few files per call, and a run of eleven
# cases writes a JSON and a log per case (a run of this script lost its records that way:
# files_left_out "(count)"). Where $OUT is set, the script packs WORK/cases and the compile
# phase's exit codes and logs into $OUT/ladder-cases.tgz at the end, one file.
set -u
work=$1; phase1=${2:-300}; deadline=${3:-540}; spec=${4:-official,regular}; stages=${5:-all}
rounds=${6:-1}; par=${7:-14}; unit=${8:-case}
t0=$(date +%s)
bash benchmarks/h200_warm.sh "$work/warm" "$stages" "$spec" "$phase1" "$par" "$unit"
mkdir -p "$work/cases"
for c in $(python3 -c "from mamba3_perf.bench import select_cases; print(' '.join(c.id for c in select_cases('$spec')))"); do
  left=$(( deadline - ($(date +%s) - t0) ))
  if [ "$left" -lt 15 ]; then echo "  skipped $c: deadline"; continue; fi
  skip=()
  for f in "$work"/warm/rc/"$c"__*; do
    [ -e "$f" ] || continue
    rc=$(cat "$f")
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      skip+=(--skip "${f##*__}=compile and first run did not end within ${phase1} s (benchmarks/h200_warm.sh)")
    elif [ "$rc" != 0 ]; then  # e.g. a CUDA fault, which would end the case's timing process with it
      skip+=(--skip "${f##*__}=compile and first run failed with exit status $rc (benchmarks/h200_warm.sh; its log: ${f%/rc/*}/${f##*/}.log)")
    fi
  done
  timeout "$left" python3 benchmarks/ladder.py --cases "$c" --stages "$stages" --rounds "$rounds" "${skip[@]}" \
    --out /tmp/ladder-runs --warmup-ms 10 --rep-ms 60 ${LADDER_FLAGS:-} --json "$work/cases/$c.json" > "$work/cases/$c.log" 2>&1
  echo "  timed $c rc=$? $(( $(date +%s) - t0 ))s"
done
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  tar czf "$OUT/ladder-cases.tgz" -C "$work" cases warm/rc $(cd "$work" && ls warm/*.log 2>/dev/null) && echo "  packed $OUT/ladder-cases.tgz"
fi
