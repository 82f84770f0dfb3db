#!/usr/bin/env bash
# The ragkv recipe on Slurm (docs/many-machines.md): build-index → precompute array → answer array
# per mode → merge per mode, chained with --dependency=afterok (a failed stage cancels the stages
# after it: --kill-on-invalid-dep). Every node must see WORK (NFS, Lustre: see the docs for what
# the file system must honour) and run the same ragkv binary and model files.
#
#   submit.sh --work DIR --corpus FILE --queries FILE [--shards N] [--modes auto,full]
#             [--ragkv PATH] [--args 'FLAGS'] [--precompute-args 'FLAGS'] [--answer-args 'FLAGS']
#             [--sbatch-args 'FLAGS'] [--wait]
#
# --args go to build-index, precompute and answer (e.g. --model); --sbatch-args to every sbatch
# (e.g. --partition, --account, --time). Writes DIR/jobs.env (the job ids) and logs under DIR/logs/.
# The answers end in DIR/answers/MODE.jsonl. An existing DIR/index is kept (no build-index job).
# --wait: returns when every job has left the queue; exit status 1 when any did not complete.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

work="" corpus="" queries="" shards=3 modes=auto ragkv=ragkv args="" pre_args="" ans_args="" sb_args="" wait=0
while [ $# -gt 0 ]; do
  case "$1" in
    --work) work=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    --queries) queries=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --ragkv) ragkv=$2; shift 2 ;;
    --args) args=$2; shift 2 ;;
    --precompute-args) pre_args=$2; shift 2 ;;
    --answer-args) ans_args=$2; shift 2 ;;
    --sbatch-args) sb_args=$2; shift 2 ;;
    --wait) wait=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "submit.sh: unknown argument '$1' (--help lists them)" >&2; exit 64 ;;
  esac
done
[ -n "$work" ] && [ -n "$queries" ] || { echo "submit.sh: --work and --queries are required (--help)" >&2; exit 64; }
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --shards $shards: expected a positive whole number" >&2; exit 64; }
mkdir -p "$work/logs"
work=$(cd "$work" && pwd)
abs() { (cd "$(dirname "$1")" && printf '%s/%s' "$(pwd)" "$(basename "$1")"); }
queries=$(abs "$queries")
[ -d "$work/index" ] || { [ -n "$corpus" ] || { echo "submit.sh: no $work/index yet: --corpus is required" >&2; exit 64; }; corpus=$(abs "$corpus"); }
command -v "$ragkv" >/dev/null 2>&1 || { echo "submit.sh: --ragkv $ragkv: not found" >&2; exit 64; }
[[ "$ragkv" == */* ]] && ragkv=$(abs "$ragkv")

export RAGKV="$ragkv" RAGKV_WORK="$work" RAGKV_CORPUS="$corpus" RAGKV_QUERIES="$queries" RAGKV_ARGS="$args" \
  RAGKV_PRECOMPUTE_ARGS="$pre_args" RAGKV_ANSWER_ARGS="$ans_args"
# shellcheck disable=SC2086  # sb_args is a list of flags
submit() { sbatch --parsable --kill-on-invalid-dep=yes --export=ALL --chdir="$work" $sb_args "$@" | cut -d';' -f1; }
log="$work/logs/%x-%A_%a.out"

jobs=()
dep=""
if [ ! -d "$work/index" ]; then
  index=$(submit --output="$work/logs/%x-%j.out" "$here/build-index.sbatch")
  jobs+=("$index")
  echo "index=$index" > "$work/jobs.env"
  dep="--dependency=afterok:$index"
else
  : > "$work/jobs.env"
fi
# shellcheck disable=SC2086
precompute=$(submit $dep --array="0-$((shards - 1))" --output="$log" "$here/precompute.sbatch")
jobs+=("$precompute")
echo "precompute=$precompute" >> "$work/jobs.env"
IFS=',' read -r -a mode_list <<< "$modes"
for mode in "${mode_list[@]}"; do
  answer=$(RAGKV_MODE=$mode submit --dependency="afterok:$precompute" --array="0-$((shards - 1))" --output="$log" \
           "$here/answer.sbatch")
  merge=$(RAGKV_MODE=$mode submit --dependency="afterok:$answer" --output="$work/logs/%x-%j.out" "$here/merge.sbatch")
  jobs+=("$answer" "$merge")
  echo "answer_${mode//[^a-zA-Z0-9]/_}=$answer" >> "$work/jobs.env"
  echo "merge_${mode//[^a-zA-Z0-9]/_}=$merge" >> "$work/jobs.env"
done
echo "submit.sh: jobs ${jobs[*]} (ids in $work/jobs.env; logs in $work/logs/)"
[ "$wait" -eq 1 ] || exit 0

# Wait until none is queued or running, then check each ended COMPLETED (array tasks included).
ids=$(IFS=,; echo "${jobs[*]}")
while [ -n "$(squeue -h -j "$ids" -o '%i' 2>/dev/null)" ]; do sleep 1; done
failed=0
for j in "${jobs[@]}"; do
  while read -r line; do
    state=$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<< "$line")
    name=$(sed -n 's/.*JobName=\([^ ]*\).*/\1/p' <<< "$line")
    id=$(sed -n 's/^JobId=\([0-9]*\).*/\1/p' <<< "$line")
    task=$(sed -n 's/.*ArrayTaskId=\([0-9]*\).*/\1/p' <<< "$line")
    if [ "$state" != COMPLETED ]; then
      echo "submit.sh: job $id${task:+_$task} ($name) ended $state (log under $work/logs/)" >&2
      failed=1
    fi
  done < <(scontrol -o show job "$j")
done
exit $failed
