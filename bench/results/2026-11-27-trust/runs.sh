#!/bin/bash
# 2026-11-27 — compute that counts every pass, and the margin fallback.
# The exact commands run, in order, one process at a time with one thread each, on the CPU
# developer machine (2 cores, AMD EPYC, shared: the other core busy with another engineer's builds).
# Binary: the frozen build of commit ebc8129. Work directory (indexes, stores, records) outside the repo.
set -e
R=/work/frozen/ragkv-ebc8129            # ragkv at ebc8129
M=/work/main/models
S=$M/SmolLM2-135M-Instruct.Q4_1.gguf    # the default model, named explicitly
G=$M/gemma-3-270m-q4_k_m.gguf
E=$M/all-MiniLM-L6-v2                   # the default embedder, named explicitly
D=/work/shared/data
mkdir -p /work/trust-runs && cd /work/trust-runs

# the 200 SQuAD questions of the earlier runs
python3 -c "l=open('$D/squad-dev.queries.jsonl').readlines(); open('squad200.jsonl','w').writelines(l[::len(l)//200][:200])"

# SQuAD index (1,726 passages, 256-token chunks, 1,903 chunks; the default LLM's tokenizer). Gemma 3
# uses the same index, as the 2026-11-26 runs did.
/usr/bin/time -v $R build-index --corpus $D/squad-dev.corpus.jsonl --out idx-squad --embedder $E --model $S --threads 1

# SmolLM2 store with the DEFAULT neighbour variants (--neighbours 2): 750 canonical caches + 750 variants
/usr/bin/time -v $R precompute --model $S --embedder $E --index idx-squad --store store-squad-smollm2 \
    --queries squad200.jsonl --top-k 5 --threads 1 > precompute-smollm2.json

EVAL="--modes auto,blend --fallback-margins 0,0.02,0.05,0.1 --top-k 5 --max-tokens 16 --min-agreement 0 --max-kl -1 --batch 1 --threads 1"
# (reuse, the recovery reference, and full, the baseline, are added by eval)
/usr/bin/time -v $R eval squad200.jsonl --model $S --embedder $E --index idx-squad --store store-squad-smollm2 $EVAL \
    --answers 2026-11-27-trust-squad200-smollm2.answers.jsonl --resume --report 2026-11-27-trust-squad200-smollm2.md \
    > 2026-11-27-trust-squad200-smollm2.json

# Gemma 3 store (same index, default neighbour variants) and the same eval
/usr/bin/time -v $R precompute --model $G --embedder $E --index idx-squad --store store-squad-gemma3 \
    --queries squad200.jsonl --top-k 5 --threads 1 > precompute-gemma3.json
/usr/bin/time -v $R eval squad200.jsonl --model $G --embedder $E --index idx-squad --store store-squad-gemma3 $EVAL \
    --answers 2026-11-27-trust-squad200-gemma3.answers.jsonl --resume --report 2026-11-27-trust-squad200-gemma3.md \
    > 2026-11-27-trust-squad200-gemma3.json

# the records, kept here
gzip -9 2026-11-27-trust-squad200-*.answers.jsonl

# the tables of the README section (run in this folder)
#   python3 before-after.py   # (a) old vs new compute figure, and (b) prophet/kv/random at equal new compute
#   python3 frontier.py       # (c) the margin-fallback frontier, fallback counts checked against the records
#   python3 oldsweeps.py      # the 2026-11-26 records re-read, checked against their .md tables

# As run: build-index and the SmolLM2 precompute by hand, the rest by a driver that waited for the
# precompute and then ran eval SmolLM2, precompute Gemma 3 and eval Gemma 3 back to back, each under
# `/usr/bin/time -v -o STEP.time` with date stamps (steps.log). The Python scripts write
# __pycache__/ when run; it is not kept.
