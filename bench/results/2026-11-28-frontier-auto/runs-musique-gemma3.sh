#!/bin/bash
# MuSiQue 150, Gemma 3: every mode with derived fallback rules, auto itself with its new defaults,
# on the binary of commit bb1d893 with RAGKV_PREFILL_KERNELS=kquants (this store was made by ef28db7,
# before the legacy-block kernels), after the store's variants (pid 23463).
cd /work/mq-runs
. ./env.sh
R=/work/frozen/ragkv-bb1d893
export RAGKV_PREFILL_KERNELS=kquants
stamp() { echo "$(date -u +%FT%TZ) $*" >> steps.log; }
while kill -0 23463 2>/dev/null; do sleep 10; done
RULES=0,0.005,0.01,0.02,0.05,0.1,0/0.02,0/0.05,0/0.1,0.005/0.05,0.005/0.1,0.01/0.1
EVAL="--modes auto,blend,craft,craft/prophet@0.15,reuse --fallback-margins $RULES --max-tokens 16 --batch 1 --threads 1"
stamp "start final-eval-musique150-gemma3"
/usr/bin/time -v -o final-eval-gemma3.time sh -c "$R eval $Q --model $G --embedder $E --index idx-mq --store store-mq-gemma3 $EVAL \
  --baseline-cache final-baseline-gemma3.jsonl --answers musique150-gemma3.answers.jsonl --resume \
  --report musique150-gemma3.md > musique150-gemma3.json 2> final-eval-gemma3.err"
stamp "end final-eval-musique150-gemma3 rc=$?"
