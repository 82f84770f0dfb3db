#!/bin/bash
# 2026-11-27 (later) — the default on the frontier: auto, blend, craft and craft/prophet at two alphas
# on SQuAD 200, every mode with derived margin-fallback rules (M and M/C), both default models.
# One process at a time with one thread each, on the CPU developer machine (2 cores, AMD EPYC
# Zen 4, shared: the other core ran a MuSiQue precompute for the trust issue's frontier, and part
# of the SmolLM2 eval shared the machine with the test suite). Binary: the frozen build of commit
# f3f65a8 (the margin fallback after the exact prefix, the M/C rule, eval --fit-fallback).
# The 2026-11-27 trust stores were made under an older model fingerprint: built again here.
set -e
R=/work/frozen/ragkv-f3f65a8
M=/work/main/models
S=$M/SmolLM2-135M-Instruct.Q4_1.gguf
G=$M/gemma-3-270m-q4_k_m.gguf
E=$M/all-MiniLM-L6-v2
T=/work/trust-runs   # its idx-squad (SmolLM2's tokenizer; Gemma 3 uses the same index) and squad200.jsonl
RULES=0,0.005,0.01,0.02,0.05,0.1,0/0.02,0/0.05,0/0.1,0.005/0.05,0.005/0.1,0.01/0.1
EVAL="--modes auto,blend,craft,craft/prophet@0.05,craft/prophet@0.15 --fallback-margins $RULES --top-k 5 --max-tokens 16 --min-agreement 0 --max-kl -1 --batch 1 --threads 1"
for m in gemma3 smollm2; do
  [ $m = gemma3 ] && MODEL=$G || MODEL=$S
  $R precompute --model $MODEL --embedder $E --index $T/idx-squad --store store-squad-$m \
    --queries squad200.jsonl --top-k 5 --threads 1 > precompute-squad200-$m.json
  $R eval squad200.jsonl --model $MODEL --embedder $E --index $T/idx-squad --store store-squad-$m $EVAL \
    --baseline-cache baseline-squad200-$m.jsonl --answers squad200-$m.answers.jsonl --resume \
    --report squad200-$m.md > squad200-$m.json
done
# tables: python3 table.py squad200-*.json (every mode and rule, the targets marked);
#         python3 sig.py squad200-*.answers.jsonl (how often the repair moved the first token,
#         and how often that was a disagreement with full).
# The pictures here were drawn again from the .json by commit 87dd209's trade-off plot (a mode and
# its fallbacks in one colour): the eval binary drew the same points in the older style.
