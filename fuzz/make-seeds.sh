#!/usr/bin/env bash
# Writes the named seeds of the checked-in corpus fuzz/corpus/ (README "Fuzzing and sanitizers"): tiny GGUF
# models from `ragkv make-test-model` (one per architecture), then fuzz-make-seeds for edits of
# them and every other target's seeds. Run by hand after a format changes:
#   make build fuzz-build && bash fuzz/make-seeds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RAGKV=${RAGKV:-build/ragkv}
SEEDS=${SEEDS:-build-fuzz/fuzz/fuzz-make-seeds}
# Named seeds are rewritten in place; inputs kept from fuzzing (crash-*, oom-* regressions, and
# libFuzzer's SHA-1-named corpus entries) stay.
mkdir -p fuzz/corpus/gguf
for arch in llama qwen2 gemma3; do
  "$RAGKV" make-test-model --out "fuzz/corpus/gguf/$arch.gguf" --arch "$arch" --layers 1 --embd 8 \
    --heads 2 --kv-heads 1 --ff 16 --context 32 --weight-type f16 --seed 1 > /dev/null
done
"$SEEDS" fuzz/corpus
du -sh fuzz/corpus
