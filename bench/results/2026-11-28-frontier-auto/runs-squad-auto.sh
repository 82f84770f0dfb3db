#!/bin/bash
# issue 39: auto itself with its new defaults (alpha 0.15, rule 0/0.05) on the binary of commit
# bb1d893, with RAGKV_PREFILL_KERNELS=kquants so its numerics match these stores (made by f3f65a8,
# before the legacy-block kernels). reuse beside it; the default gate (agreement >= 0.9, KL <= 0.1).
cd /work/auto-runs
. ./env.sh
R=/work/frozen/ragkv-bb1d893
export RAGKV_PREFILL_KERNELS=kquants
stamp() { echo "$(date -u +%FT%TZ) $*" >> steps.log; }
for m in gemma3 smollm2; do
  [ $m = gemma3 ] && MODEL=$G || MODEL=$S
  stamp "start final-auto-squad200-$m"
  /usr/bin/time -v -o final-auto-squad200-$m.time sh -c "$R eval squad200.jsonl --model $MODEL --embedder $E --index $T/idx-squad \
    --store store-squad-$m --modes auto,reuse --fallback-margins $RULES --top-k 5 --max-tokens 16 --batch 1 --threads 1 \
    --baseline-cache final-baseline-squad200-$m.jsonl --answers final-auto-squad200-$m.answers.jsonl --resume \
    --report final-auto-squad200-$m.md > final-auto-squad200-$m.json 2> final-auto-squad200-$m.err"
  stamp "end final-auto-squad200-$m rc=$?"
done
# The question-rows experiment: a scratch build of bb1d893 with exp-question-rows.patch applied
# (not committed), the same eval with --modes auto and RAGKV_EXP_QROWS=1 or 4 in the environment
# (the question's last 1 or 4 rows recomputed in prophet's second pass), Gemma 3 only:
#   RAGKV_EXP_QROWS=$q ragkv-exp eval squad200.jsonl ... --modes auto ... --answers exp-q$q-squad200-gemma3.answers.jsonl
# The default rule 0.003/0.02 on these records: python3 derive_rule.py final-auto-squad200-gemma3.answers.jsonl.gz auto 0.003/0.02
