#!/bin/bash
# The one GPU check (issue 40 item 7), for the device machine: the CUDA tests, device-check (the
# model-level agreement with the CPU behind --device auto), then bench prefill and bench reuse on
# random-weight models of Llama-3-8B's shapes (bf16, and the Q4_K_M mix), llama.cpp's llama-bench
# on the same files where the bundle carries one, and last scripts/gpu-report.py's table
# (gpu-report.md / .json: % of the bf16 peak, % of HBM bandwidth, TTFT per tier, agreement,
# ratios to llama.cpp). Each step has its own time limit and its output lands in OUT_DIR
# (nvidia-smi.txt, cuda-tests.txt, device-check.json, bench-*.json, llama-bench-*.json, their .err
# logs and steps.txt), so one failing step still leaves the others' results.
#
#   bash scripts/gpu-validate.sh OUT_DIR [BUNDLE_DIR [GROUP...]]    (BUNDLE_DIR from `make device-bundle`)
#
# Groups, run in this order (the default: all of them): tests (CUDA tests, bench device,
# device-check), bf16 (the 8B-shaped bf16 model: prefill and decode, reuse per mode and tier with
# the loading controller on), q4km (the Q4_K_M model, weights kept quantised), graphs (both
# models' decode op by op, RAGKV_CUDA_GRAPHS=0, beside the default step graphs), profile (per-op device time under RAGKV_CUDA_PROFILE:
# bf16 prefill and decode, full, reuse and blend on the device and host tiers, Q4_K_M), llama
# (llama-bench on both files, when $LLAMA_BUNDLE, default llama-bundle/, holds
# scripts/llama-bench-bundle.sh's llama-bench.xz), compare (the paths before: f32 attention, the
# FFN's products in f32, the controller off, Q4_K_M converted to f16, Q4_K_M with an f16 copy for prefill, Q4_K_M decode on f32
# activations, the decode GEMVs' stores unfused). Name fewer groups to split a run over calls of the
# device tool: the models stay in $TMPDIR on a warm machine, so a later call finds them. Within 15
# minutes of device time: `tests bf16 q4km` in the first call, then `graphs llama profile` with
# llama-bundle carried.
#
# A first run of new kernels may fail: where the CUDA tests fail, each test case runs again in a
# process of its own (cuda-tests-isolated.txt: a kernel that faults poisons its process's CUDA
# context, failing every case after it), and where a bench of the default paths fails (not by
# running out of time), it runs once more on the paths before (NAME-safe.json: step graphs off,
# f32 attention, f32 FFN products, f32 decode activations, the decode GEMVs' fused stores off),
# which the report uses in its place.
set -uo pipefail
out=${1:?output directory}
bundle=${2:-device-bundle}
shift $(($# < 2 ? $# : 2))
groups=${*:-tests bf16 q4km graphs profile llama compare}
mkdir -p "$out"
run=$bundle/run
model=${TMPDIR:-/tmp}/ragkv-llama8b.gguf
model_q4=${TMPDIR:-/tmp}/ragkv-llama8b-q4km.gguf
here=$(cd "$(dirname "$0")" && pwd)

step() {  # step NAME LIMIT_S OUTFILE COMMAND...
  local name=$1 limit=$2 file=$3
  shift 3
  local t0=$SECONDS
  timeout "$limit" "$@" > "$out/$file" 2> "$out/$name.err"
  local rc=$?
  echo "$name: rc=$rc, $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
  return $rc
}

# The paths that came before this code's kernels, each kept behind a switch (docs/gpu.md).
safe_env=(RAGKV_CUDA_GRAPHS=0 RAGKV_CUDA_ATTENTION=f32 RAGKV_CUDA_FFN_PRODUCTS=f32 RAGKV_CUDA_DECODE_ACTS=f32
  RAGKV_CUDA_GEMV_STORES=separate)

# The device tool stops a command after 600 s: the reruns below are skipped where they would end
# past this many seconds of the script (the files written so far still come back).
budget=${GPU_VALIDATE_BUDGET_S:-570}

bench_step() {  # bench_step NAME LIMIT_S OUTFILE COMMAND...: a step; where it fails in time, again on safe_env
  step "$@" && return 0
  local rc=$? name=$1 limit=$2 file=$3
  shift 3
  [ $rc -eq 124 ] && return $rc  # out of time (timeout's status): a rerun would be too
  if ((SECONDS + limit > budget)); then
    echo "$name-safe: not run (${budget} s budget)" | tee -a "$out/steps.txt"
    return $rc
  fi
  step "$name-safe" "$limit" "${file%.json}-safe.json" env "${safe_env[@]}" "$@"
}

isolate_cuda_tests() {  # each CUDA test case in a process of its own, within ISOLATE_S seconds in all
  local names t0=$SECONDS pass=0 fail=0 skipped=0 name rc log
  names=$("$run" ragkv_tests -ltc -tc='cuda*' 2> /dev/null | sed -n '/^==*$/,/^==*$/p' | grep -v '^==*$')
  if [ -z "$names" ]; then
    echo "isolated: no test case listed (ragkv_tests -ltc failed)"
    return
  fi
  while IFS= read -r name; do
    [ -n "$name" ] || continue
    if ((SECONDS - t0 > ISOLATE_S)); then
      skipped=$((skipped + 1))
      echo "NOT RUN (out of time): $name"
      continue
    fi
    # doctest's filters split at commas and take ? for any one character.
    log=$(timeout 45 "$run" ragkv_tests -tc="${name//,/?}" 2>&1)
    rc=$?
    # A filter that matched nothing would pass too: the case must have run.
    if [ $rc -eq 0 ] && grep -Eq 'test cases: +1 \| +1 passed' <<< "$log"; then
      pass=$((pass + 1))
      echo "passed: $name"
    else
      fail=$((fail + 1))
      echo "FAILED (rc=$rc): $name"
      grep -E 'ERROR|FATAL|CHECK|REQUIRE|error' <<< "$log" | head -20
    fi
  done <<< "$names"
  echo "isolated: $pass passed, $fail failed, $skipped not run, $((SECONDS - t0)) s"
}

make_model() {  # make_model NAME WEIGHT_TYPE PATH (kept between groups and calls on a warm machine)
  [ -s "$3" ] && return
  step "$1" 240 "$1.txt" "$run" ragkv make-test-model --arch llama --layers 32 --embd 4096 --heads 32 \
    --kv-heads 8 --ff 14336 --context 8192 --separate-output --vocab 128256 --weight-type "$2" --out "$3"
}

has() { [[ " $groups " == *" $1 "* ]]; }

nvidia-smi > "$out/nvidia-smi.txt" 2>&1
if has tests; then
  step cuda-tests 300 cuda-tests.txt "$run" ragkv_tests -tc='cuda*' --duration=true
  rc=$?
  # Failed in time (a hang would hang again): case by case, within 150 s, less where that would
  # leave under 300 s of the budget to the groups after.
  if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then
    ISOLATE_S=$((budget - SECONDS - 300 < 150 ? budget - SECONDS - 300 : 150))
    if ((ISOLATE_S > 30)); then
      isolate_cuda_tests > "$out/cuda-tests-isolated.txt" 2>&1
      tail -1 "$out/cuda-tests-isolated.txt" | tee -a "$out/steps.txt"
    fi
  fi
  # The chip's reachable limits: cuBLAS GEMM TFLOP/s, device copy GB/s (the report's reference).
  step bench-device 60 bench-device.json "$run" ragkv bench device
  # Teacher-forced agreement with the CPU on the default models' shapes (issue 40's bar); its
  # record (what --device auto trusts) lands beside the report.
  step device-check 240 device-check.json env RAGKV_DEVICE_RECORDS="$out/device-records" "$run" ragkv device-check
fi
if has bf16; then
  make_model make-model bf16 "$model"
  bench_step bench-prefill 120 bench-prefill.json "$run" ragkv bench prefill --models "$model" --device cuda \
    --tokens 4096
  # The loading controller on (the GPU's default).
  bench_step bench-reuse 200 bench-reuse.json "$run" ragkv bench reuse --model "$model" --device cuda --chunks 8 \
    --chunk-tokens 496
fi
if has q4km; then
  # llama.cpp's Q4_K_M mix (Q4_K; Q6_K for the head and some layers' attn_v and ffn_down): kept
  # quantised on the device (the default), then converted to f16 at load (the path before).
  make_model make-model-q4km q4_k_m "$model_q4"
  bench_step bench-prefill-q4km 150 bench-prefill-q4km.json "$run" ragkv bench prefill --models "$model_q4" \
    --device cuda --tokens 4096
fi
if has graphs; then
  # Decode steps op by op (RAGKV_CUDA_GRAPHS=0), against the default step graphs of the runs above
  # (their JSON's step_graphs: steps captured, replayed and missed).
  make_model make-model bf16 "$model"
  step bench-prefill-op-by-op 120 bench-prefill-op-by-op.json env RAGKV_CUDA_GRAPHS=0 "$run" ragkv bench prefill \
    --models "$model" --device cuda --tokens 4096
  make_model make-model-q4km q4_k_m "$model_q4"
  step bench-prefill-q4km-op-by-op 150 bench-prefill-q4km-op-by-op.json env RAGKV_CUDA_GRAPHS=0 "$run" ragkv bench \
    prefill --models "$model_q4" --device cuda --tokens 4096
fi
if has profile; then
  # Where the time goes (cuda/op-profile.h: device time per section, op, path and phase, and the
  # idle time between ops): the bf16 prefill and decode, full, reuse and blend on the device and
  # host tiers, and the Q4_K_M prefill and decode. Timing events slow a step a little: the figures above are unprofiled.
  make_model make-model bf16 "$model"
  step profile-prefill 120 bench-prefill-profiled.json env RAGKV_CUDA_PROFILE="$out/profile-prefill-bf16.json" \
    "$run" ragkv bench prefill --models "$model" --device cuda --tokens 4096
  step profile-reuse 150 bench-reuse-profiled.json env RAGKV_CUDA_PROFILE="$out/profile-blend-bf16.json" \
    "$run" ragkv bench reuse --model "$model" --device cuda --chunks 8 --chunk-tokens 496 --modes reuse,blend \
    --tiers device,host --repetitions 1
  make_model make-model-q4km q4_k_m "$model_q4"
  step profile-prefill-q4km 150 bench-prefill-q4km-profiled.json \
    env RAGKV_CUDA_PROFILE="$out/profile-prefill-q4km.json" "$run" ragkv bench prefill --models "$model_q4" \
    --device cuda --tokens 4096
fi
llama_bundle=${LLAMA_BUNDLE:-llama-bundle}
llama_bench=${TMPDIR:-/tmp}/llama-bench
if has llama && [ -s "$llama_bundle/llama-bench.xz" ]; then
  # llama.cpp's CUDA llama-bench (scripts/llama-bench-bundle.sh; too large to travel with
  # device-bundle/, so it comes in a call of its own). Prefill of the same 4,096 tokens on an
  # empty context; decode of 32 tokens on an empty context and after 4,096 (ours decodes after the
  # timed prompt). Flash attention on, every layer on the GPU.
  # (xz where the machine has it, else python3's lzma)
  [ -x "$llama_bench" ] || {
    { if command -v xz > /dev/null; then xz -dc "$llama_bundle/llama-bench.xz"
      else python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' \
        "$llama_bundle/llama-bench.xz"; fi; } > "$llama_bench.part" && mv "$llama_bench.part" "$llama_bench" &&
      chmod +x "$llama_bench"
  }
  for pair in "bf16:$model" "q4km:$model_q4"; do
    [ -s "${pair#*:}" ] || continue
    step "llama-bench-${pair%%:*}" 240 "llama-bench-${pair%%:*}.json" \
      env LD_LIBRARY_PATH="$llama_bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$llama_bench" -m "${pair#*:}" \
      -p 4096 -n 32 -d 0,4096 -ngl 99 -fa on -r 3 -o json
  done
fi
if has compare; then
  # The paths before, for the ratios: the f32 attention kernel, the FFN's products in f32, the
  # loading controller off (the runs of 2026-11-24/26), the Q4_K_M weights converted to f16 at
  # load, and decoded against f32 activations.
  make_model make-model bf16 "$model"
  step bench-prefill-attn-f32 120 bench-prefill-attn-f32.json env RAGKV_CUDA_ATTENTION=f32 "$run" ragkv bench prefill \
    --models "$model" --device cuda --tokens 4096
  # The prefill FFN's gate/up products in f32 (before they were written in f16).
  step bench-prefill-ffn-f32 120 bench-prefill-ffn-f32.json env RAGKV_CUDA_FFN_PRODUCTS=f32 "$run" ragkv bench \
    prefill --models "$model" --device cuda --tokens 4096
  step bench-reuse-no-control 200 bench-reuse-no-control.json "$run" ragkv bench reuse --model "$model" \
    --device cuda --chunks 8 --chunk-tokens 496 --load-control off
  make_model make-model-q4km q4_k_m "$model_q4"
  step bench-prefill-q4km-f16 150 bench-prefill-q4km-f16.json env RAGKV_CUDA_WEIGHTS=f16 "$run" ragkv bench prefill \
    --models "$model_q4" --device cuda --tokens 4096
  # Quantised for decode plus an f16 copy for prefill (the flag of issue 40 item 3).
  step bench-prefill-q4km-quant-f16 150 bench-prefill-q4km-quant-f16.json env RAGKV_CUDA_WEIGHTS=quant+f16 "$run" \
    ragkv bench prefill --models "$model_q4" --device cuda --tokens 4096
  # Decode steps with the GEMVs' stores unfused (the rotation and KV scatter, the GLU's
  # quantisation in launches of their own, as before): what one and two launches fewer a layer give.
  step bench-prefill-q4km-separate-stores 150 bench-prefill-q4km-separate-stores.json \
    env RAGKV_CUDA_GEMV_STORES=separate "$run" ragkv bench prefill --models "$model_q4" --device cuda --tokens 4096
  step bench-prefill-separate-stores 120 bench-prefill-separate-stores.json env RAGKV_CUDA_GEMV_STORES=separate \
    "$run" ragkv bench prefill --models "$model" --device cuda --tokens 4096
  # Decode steps on the quantised weights with f32 activations (the GEMV before the integer one).
  step bench-prefill-q4km-f32-acts 150 bench-prefill-q4km-f32-acts.json env RAGKV_CUDA_DECODE_ACTS=f32 "$run" ragkv \
    bench prefill --models "$model_q4" --device cuda --tokens 4096
  # Blend with every attention on the f32 kernel (prefill and recompute rows included, prophet's
  # question totals by its second pass over the keys), against the bf16 group's blend: what the
  # tensor-core kernels and their mass passes save together (not the exact path before this stop,
  # which ran the layer's attention on tensor cores and the question's again on the f32 kernel).
  step bench-reuse-attn-f32 200 bench-reuse-attn-f32.json env RAGKV_CUDA_ATTENTION=f32 "$run" ragkv bench reuse \
    --model "$model" --device cuda --chunks 8 --chunk-tokens 496 --modes blend --tiers device
fi
command -v python3 > /dev/null && python3 "$here/gpu-report.py" "$out" > /dev/null 2> "$out/gpu-report.err"
echo "report: $out/gpu-report.md" | tee -a "$out/steps.txt"
