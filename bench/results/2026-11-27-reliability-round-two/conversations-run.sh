#!/bin/bash
# 4 SQuAD conversations x 12 turns over a 200-passage SQuAD subset (bench/results/README.md § Multi-turn
# conversations); SmolLM2 (the default model), --threads 2. Usage: conversations-run.sh BIN TAG
# In a folder holding conv.jsonl, index/ and store/ (commands in the README section).
set -e
BIN=$1; TAG=$2
for m in full auto blend; do
  $BIN answer conv.jsonl --index index --store store --mode $m --threads 2 --out $TAG-$m.jsonl --summary $TAG-$m.json 2>/dev/null
done
