#!/bin/bash
# Two precompute processes on one fresh store against one (work claimed, not duplicated):
# bench/precompute_claims.sh MODE DIR, with RAGKV (binary), INDEX and LIMIT from the
# environment (defaults: build/ragkv, /work/data/squad-index, 60). MODE: one1 (one process,
# --threads 1), one2 (one process, --threads 2), two1 (two processes started together, --threads 1
# each). DIR/store is made fresh; each process's summary goes to DIR/outN.json, the wall time of
# the whole mode to DIR/wall.json (and stdout). Time it through /work/tools/quiet.sh.
set -u
B=${RAGKV:-build/ragkv}; IDX=${INDEX:-/work/data/squad-index}; L=${LIMIT:-60}
mode=$1; d=$2; mkdir -p "$d"; rm -rf "$d/store"
t0=$(date +%s.%N)
case $mode in
  one1) $B precompute --index "$IDX" --store "$d/store" --limit "$L" --threads 1 >"$d/out0.json" 2>"$d/err0.txt" ;;
  one2) $B precompute --index "$IDX" --store "$d/store" --limit "$L" --threads 2 >"$d/out0.json" 2>"$d/err0.txt" ;;
  two1) $B precompute --index "$IDX" --store "$d/store" --limit "$L" --threads 1 >"$d/out0.json" 2>"$d/err0.txt" &
        $B precompute --index "$IDX" --store "$d/store" --limit "$L" --threads 1 >"$d/out1.json" 2>"$d/err1.txt" &
        wait ;;
  *) echo "usage: $0 one1|one2|two1 DIR" >&2; exit 2 ;;
esac
t1=$(date +%s.%N)
echo "{\"mode\":\"$mode\",\"limit\":$L,\"wall_s\":$(echo "$t1 - $t0" | bc)}" | tee "$d/wall.json"
