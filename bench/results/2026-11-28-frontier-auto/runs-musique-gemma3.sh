#!/bin/bash
# 2026-11-28 — MuSiQue 150 (CacheBlend's set), Gemma 3 270M: the store, every mode with derived
# margin-fallback rules (auto itself among them), then craft/prophet at alpha 0.25 and 0.35.
# One process per core, --threads 1, on the CPU developer machine (2 cores, shared).
# The store was made by the frozen build of ef28db7 (before the legacy-block kernels) and
# resumed by the same build; the evals run on bb1d893 with RAGKV_PREFILL_KERNELS=kquants, which
# reproduces that build's numerics (the store's key does not name the kernel set).
set -e
M=/work/main/models
S=$M/SmolLM2-135M-Instruct.Q4_1.gguf
G=$M/gemma-3-270m-q4_k_m.gguf
E=$M/all-MiniLM-L6-v2
D=/work/shared/data
Q=$D/musique-cacheblend.queries.jsonl
OLD=/work/frozen/ragkv-ef28db7
R=/work/frozen/ragkv-bb1d893
$OLD build-index --corpus $D/musique-cacheblend.corpus.jsonl --out idx-mq \
  --chunking fixed --chunk-tokens 1024 --embedder $E --model $S --threads 1
$OLD precompute --model $G --embedder $E --index idx-mq --store store-mq-gemma3 --queries $Q --threads 1
export RAGKV_PREFILL_KERNELS=kquants
RULES=0,0.005,0.01,0.02,0.05,0.1,0/0.02,0/0.05,0/0.1,0.005/0.05,0.005/0.1,0.01/0.1
COMMON="--fallback-margins $RULES --max-tokens 16 --batch 1 --threads 1 --baseline-cache final-baseline-gemma3.jsonl --resume"
$R eval $Q --model $G --embedder $E --index idx-mq --store store-mq-gemma3 $COMMON \
  --modes auto,blend,craft,craft/prophet@0.15,reuse \
  --answers musique150-gemma3.answers.jsonl --report musique150-gemma3.md > musique150-gemma3.json || true
$R eval $Q --model $G --embedder $E --index idx-mq --store store-mq-gemma3 $COMMON \
  --modes craft/prophet@0.25,craft/prophet@0.35 \
  --answers alpha-musique150-gemma3.answers.jsonl --report alpha-musique150-gemma3.md > alpha-musique150-gemma3.json || true
# tables: python3 ../2026-11-27-default-frontier/table.py musique150-gemma3.json alpha-musique150-gemma3.json
# frontier: python3 ../2026-11-27-default-frontier/frontier_check.py musique150-gemma3.answers.jsonl auto 0/0.05
# (eval exits 1 when a gated mode fails the gate: reuse always does.)
