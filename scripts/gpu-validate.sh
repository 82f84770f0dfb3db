#!/bin/bash
# The README's "GPU machine" recipe in one run, for the device machine: the CUDA tests, then
# bench prefill and bench reuse on a random-weight model of Llama-3-8B's shapes. Each step has
# its own time limit and its output lands in OUT_DIR (nvidia-smi.txt, cuda-tests.txt,
# device-check.json, bench-prefill.json, bench-reuse.json and their .err logs), so one failing step still leaves
# the others' results. The Q4_K_M steps come last: a slow one leaves the earlier figures.
#
#   bash scripts/gpu-validate.sh OUT_DIR [BUNDLE_DIR]     (BUNDLE_DIR from `make device-bundle`)
set -uo pipefail
out=${1:?output directory}
bundle=${2:-device-bundle}
mkdir -p "$out"
run=$bundle/run
model=${TMPDIR:-/tmp}/ragkv-llama8b-$$.gguf
model_q4=${TMPDIR:-/tmp}/ragkv-llama8b-q4km-$$.gguf
trap 'rm -f "$model" "$model_q4"' EXIT

step() {  # step NAME LIMIT_S OUTFILE COMMAND...
  local name=$1 limit=$2 file=$3
  shift 3
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$file" 2> "$out/$name.err"
  local rc=$?
  echo "$name: rc=$rc, $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
}

nvidia-smi > "$out/nvidia-smi.txt" 2>&1
step cuda-tests 180 cuda-tests.txt "$run" ragkv_tests -tc='cuda*'
# The model-level check against the CPU (teacher-forced agreement, issue 40's bar) on the default
# models' shapes; its record (what --device auto trusts) lands beside the report.
step device-check 240 device-check.json env RAGKV_DEVICE_RECORDS="$out/device-records" "$run" ragkv device-check
step make-model 180 make-model.txt "$run" ragkv make-test-model --arch llama --layers 32 \
  --embd 4096 --heads 32 --kv-heads 8 --ff 14336 --context 8192 --weight-type bf16 --out "$model"
step bench-prefill 120 bench-prefill.json "$run" ragkv bench prefill --models "$model" \
  --device cuda --tokens 4096
step bench-reuse 200 bench-reuse.json "$run" ragkv bench reuse --model "$model" \
  --device cuda --chunks 8 --chunk-tokens 496
# The same shapes in Q4_K_M (llama.cpp's mix: Q4_K, Q6_K for the head and some layers' attn_v
# and ffn_down; writing it takes about 2 minutes of one core): weights kept quantised on the
# device (the default), then converted to f16 at load (RAGKV_CUDA_WEIGHTS=f16, the path before),
# prefill and decode each.
step make-model-q4km 240 make-model-q4km.txt "$run" ragkv make-test-model --arch llama --layers 32 \
  --embd 4096 --heads 32 --kv-heads 8 --ff 14336 --context 8192 --weight-type q4_k_m --out "$model_q4"
step bench-prefill-q4km 150 bench-prefill-q4km.json "$run" ragkv bench prefill --models "$model_q4" \
  --device cuda --tokens 4096
step bench-prefill-q4km-f16 150 bench-prefill-q4km-f16.json env RAGKV_CUDA_WEIGHTS=f16 "$run" ragkv bench prefill \
  --models "$model_q4" --device cuda --tokens 4096
