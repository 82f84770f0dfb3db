#!/bin/bash
# llama.cpp's llama-bench with its CUDA backend for sm_90 (H100, H200), packed to travel to the GPU
# machine for issue 40's side-by-side (scripts/gpu-validate.sh, group `llama`). Built from the
# llama.cpp source vendored in the llama-cpp-python source package, as the CPU comparison's
# (docs/benchmarks.md), with ggml linked statically, then stripped and xz-compressed.
#
#   bash scripts/llama-bench-bundle.sh [OUT_DIR]      (default llama-bundle/: llama-bench.xz, lib/, build.txt)
#
# Measured here (2 cores, one used, AMD EPYC, nvcc 13.0): 51 minutes; the binary is 75 MiB, 66 MiB
# stripped, 39 MiB compressed — too large to travel beside device-bundle/ in one device call (64
# MiB), so it goes in a call of its own (docs/gpu.md). JOBS=N builds with N jobs.
set -euo pipefail
out=$(mkdir -p "${1:-llama-bundle}" && cd "${1:-llama-bundle}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/llama-bench-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
python3 -m pip download --no-deps --no-binary :all: llama-cpp-python -d . > pip.log 2>&1
tar xzf llama_cpp_python-*.tar.gz
src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
t0=$SECONDS
cmake -S "$src" -B build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DGGML_OPENMP=OFF > cmake.log
cmake --build build -j "${JOBS:-$(nproc)}" --target llama-bench > build.log
strip build/bin/llama-bench
xz -T0 -9 -c build/bin/llama-bench > "$out/llama-bench.xz"
# The libraries it needs beyond glibc and the CUDA toolkit (as scripts/device-bundle.sh does).
mkdir -p "$out/lib"
ldd build/bin/llama-bench | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|/libcuda|/libcublas|/libcudart|/libnccl|/cuda' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
{
  echo "llama-cpp-python $(ls llama_cpp_python-*.tar.gz), llama.cpp commit $(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "built in $((SECONDS - t0)) s with ${JOBS:-$(nproc)} jobs; stripped $(stat -c %s build/bin/llama-bench) bytes, xz $(stat -c %s "$out/llama-bench.xz") bytes"
  ldd build/bin/llama-bench
} > "$out/build.txt"
cat "$out/build.txt"
