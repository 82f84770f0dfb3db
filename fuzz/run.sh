#!/usr/bin/env bash
# `make fuzz` / `make test`'s fuzz smoke: runs every fuzz target of FUZZ_BUILD_DIR for SECONDS
# seconds each, starting from its checked-in seeds (fuzz/corpus/<target>/, read only) plus the
# inputs earlier runs found (FUZZ_BUILD_DIR/corpus/<target>/, where new ones are written), and
# prints per target the executions, seconds, corpus size (inputs and bytes, as libFuzzer counts
# them at the end) and crashes. A crash, leak, timeout or out-of-memory stops that target, keeps
# the input under FUZZ_BUILD_DIR/artifacts/<target>/ (emptied when the target runs again) and
# makes the script exit 1 after the other targets ran.
# Usage: fuzz/run.sh FUZZ_BUILD_DIR SECONDS [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: fuzz/run.sh FUZZ_BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: fuzz/run.sh FUZZ_BUILD_DIR SECONDS [TARGET...]}
shift 2
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(gguf safetensors chunk-kv index queries corpus tokenizer-bpe tokenizer-spm wordpiece)
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=1

# Each target's scratch files (fuzz-common.h) under one directory, memory-backed where possible,
# removed at the end (a crashing target cannot clean up after itself).
shm=/dev/shm
[ -w "$shm" ] || shm=${TMPDIR:-/tmp}
export RAGKV_FUZZ_TMPDIR=$(mktemp -d "$shm/ragkv-fuzz-run.XXXXXX")
trap 'rm -rf "$RAGKV_FUZZ_TMPDIR"' EXIT

summary=()
failed=0
for t in "${targets[@]}"; do
  bin="$build/fuzz/fuzz-$t"
  [ -x "$bin" ] || { echo "fuzz: $bin is missing (make fuzz-build)"; exit 2; }
  work="$build/corpus/$t"
  art="$build/artifacts/$t"
  log="$build/logs/$t.log"
  rm -rf "$art"  # this run's findings only (copy an artifact away before running again)
  mkdir -p "$work" "$art" "$(dirname "$log")"
  start=$(date +%s%N)
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb/-malloc_limit_mb: a reader asking for
  # 2 GB on a few KB of input is a finding too.
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$art/" "$work" "fuzz/corpus/$t" > "$log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
  corp=$(grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -1 | awk '{print $2}')
  crashes=$(find "$art" -type f | wc -l)
  status=ok
  if ((rc != 0 || crashes > 0)); then
    status="FAILED (exit $rc; see $log)"
    failed=1
    grep -E 'ERROR: |SUMMARY: |fuzz check failed|runtime error|uncaught|what\(\)' "$log" | head -8
  fi
  line=$(printf '%-14s %12s execs %7s s  corpus %-12s crashes %d  %s' "$t" "${execs:-?}" "$secs" "${corp:-?}" "$crashes" "$status")
  echo "$line"
  summary+=("$line")
done
echo
echo "fuzz summary ($seconds s per target; corpus = inputs/bytes):"
printf '%s\n' "${summary[@]}"
exit $failed
