#!/bin/bash
# 2026-11-28 (later session) — MuSiQue 150 (CacheBlend's set), SmolLM2-135M: the out-of-sample check
# of auto's default rule 0.003/0.02 (fitted on the other three cells). A fresh machine: the index,
# the store (default neighbour variants) and the eval all by the binary of commit 5ab9975 (default
# kernels: AVX-512 VNNI 16-bit prompt kernels for every block type). Two processes, --threads 1 each,
# on the 2-core CPU developer machine: two precompute runs sharing the store through claims, then
# eval in two shards (--shard 0/2, 1/2), merged by `ragkv merge`, and one eval --resume over the
# merged records for the report (it answers nothing: means and paired bootstrap intervals over all
# 150 queries). Each shard's TTFT ratios are within its own process.
set -e
M=/work/main/models
S=$M/SmolLM2-135M-Instruct.Q4_1.gguf
E=$M/all-MiniLM-L6-v2
D=/work/shared/data
Q=$D/musique-cacheblend.queries.jsonl
R=/work/frozen/ragkv-5ab9975
RULES=0,0.005,0.01,0.02,0.05,0.1,0/0.02,0/0.05,0/0.1,0.003/0.02,0.005/0.05,0.005/0.1,0.01/0.1
$R build-index --corpus $D/musique-cacheblend.corpus.jsonl --out idx-mq \
  --chunking fixed --chunk-tokens 1024 --embedder $E --model $S --threads 1
for i in 0 1; do
  $R precompute --model $S --embedder $E --index idx-mq --store store-mq-smollm2 --queries $Q --threads 1 \
    > precompute-$i.json &
  sleep 20
done
wait
COMMON="--model $S --embedder $E --index idx-mq --store store-mq-smollm2 --modes auto,blend,craft,craft/prophet@0.15,reuse --fallback-margins $RULES --max-tokens 16 --batch 1 --threads 1"
for i in 0 1; do
  $R eval $Q $COMMON --shard $i/2 --baseline-cache baseline-smollm2-$i.jsonl \
    --answers shard-$i.answers.jsonl --resume --report shard-$i.md > shard-$i.json &
done
wait || true   # eval exits 1 when a gated mode fails the gate: reuse always does
$R merge --queries $Q --out musique150-smollm2.answers.jsonl shard-0.answers.jsonl shard-1.answers.jsonl
$R eval $Q $COMMON --answers musique150-smollm2.answers.jsonl --resume \
  --report musique150-smollm2.md > musique150-smollm2.json || true
# tables: python3 ../2026-11-27-default-frontier/table.py musique150-smollm2.json
# frontier: python3 ../2026-11-27-default-frontier/frontier_check.py musique150-smollm2.answers.jsonl auto 0.003/0.02
# near-ties and the repair-moved signal: python3 ../2026-11-27-default-frontier/sig.py musique150-smollm2.answers.jsonl
