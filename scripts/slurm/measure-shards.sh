#!/usr/bin/env bash
# The recipe's wall time with 1, 2 and 3 shards on this machine, beside one process without Slurm
# (docs/many-machines.md, bench/results/README.md): a SQuAD dev subset (the first PASSAGES passages
# of ../shared/data/squad-dev.corpus.jsonl, default 120, and up to QUERIES of the questions on them,
# default 60), the default model, --threads 1 per task, modes full and auto. Starts a loopback
# cluster (local-cluster.sh) unless SLURM_CONF is set. Writes OUT/shards.json: each run's wall time
# and whether its merged answers equal the single process's (full: records and computed tokens;
# auto: answers, with the count that differ).
#   scripts/slurm/measure-shards.sh OUT [PASSAGES] [QUERIES]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
passages=${2:-120}
queries=${3:-60}
ragkv="$root/build/ragkv"
data="$root/../shared/data"
export RAGKV_MODELS="${RAGKV_MODELS:-$root/models}"

head -n "$passages" "$data/squad-dev.corpus.jsonl" > "$out/corpus.jsonl"
python3 - "$out/corpus.jsonl" "$data/squad-dev.queries.jsonl" "$queries" > "$out/queries.jsonl" <<'PY'
import json, sys
ids = {json.loads(l)["id"] for l in open(sys.argv[1])}
n = 0
for line in open(sys.argv[2]):
    q = json.loads(line)
    if n < int(sys.argv[3]) and set(q.get("gold_passages", [])) <= ids:
        print(json.dumps(q)); n += 1
PY

if [ -z "${SLURM_CONF:-}" ]; then
  eval "$(bash "$here/local-cluster.sh" start "$out/cluster")"
  trap 'bash "$here/local-cluster.sh" stop "$out/cluster"' EXIT
fi
now() { date +%s.%N; }
elapsed() { python3 -c "print(round($2 - $1, 2))"; }
answer_args="--max-tokens 16"

# One process, no Slurm: build-index, precompute, answer in each mode.
rm -rf "$out/one"; mkdir -p "$out/one"
t0=$(now)
"$ragkv" build-index --corpus "$out/corpus.jsonl" --out "$out/one/index" --threads 1 > /dev/null 2>&1
"$ragkv" precompute --index "$out/one/index" --store "$out/one/store" --threads 1 > "$out/one/precompute.json" 2>/dev/null
for m in full auto; do
  "$ragkv" answer "$out/queries.jsonl" --index "$out/one/index" --store "$out/one/store" --mode $m --threads 1 \
    $answer_args --out "$out/one/$m.jsonl" 2>/dev/null
done
t1=$(now)
echo "{\"run\": \"one process\", \"wall_s\": $(elapsed "$t0" "$t1")}" > "$out/runs.jsonl"

for n in 1 2 3; do
  rm -rf "$out/shards-$n"
  t0=$(now)
  bash "$here/submit.sh" --work "$out/shards-$n" --corpus "$out/corpus.jsonl" --queries "$out/queries.jsonl" \
    --shards "$n" --modes full,auto --ragkv "$ragkv" --answer-args "$answer_args" --wait > /dev/null
  t1=$(now)
  echo "{\"run\": \"$n shards\", \"wall_s\": $(elapsed "$t0" "$t1")}" >> "$out/runs.jsonl"
done

python3 - "$out" <<'PY' | tee "$out/shards.json"
import json, os, sys
out = sys.argv[1]
def load(p): return [json.loads(l) for l in open(p)]
runs = [json.loads(l) for l in open(os.path.join(out, "runs.jsonl"))]
one = {m: load(os.path.join(out, "one", m + ".jsonl")) for m in ("full", "auto")}
for r in runs[1:]:
    n = r["run"].split()[0]
    for m in ("full", "auto"):
        b = load(os.path.join(out, f"shards-{n}", "answers", m + ".jsonl"))
        a = one[m]
        r[m] = {"queries": len(b),
                "ids_in_order": [x["id"] for x in a] == [x["id"] for x in b],
                "answers_differ": sum(x["answer"] != y["answer"] for x, y in zip(a, b)),
                "chunks_differ": sum(x["chunks"] != y["chunks"] for x, y in zip(a, b)),
                "computed_tokens_one": sum(x["metrics"]["computed_tokens"] for x in a),
                "computed_tokens_shards": sum(x["metrics"]["computed_tokens"] for x in b)}
    same = lambda d: sorted(os.listdir(d))
    r["store_files_equal_one_process"] = same(os.path.join(out, f"shards-{n}", "store", "kv")) == same(os.path.join(out, "one", "store", "kv"))
print(json.dumps({"passages": sum(1 for _ in open(os.path.join(out, "corpus.jsonl"))),
                  "queries": sum(1 for _ in open(os.path.join(out, "queries.jsonl"))),
                  "cpus": os.cpu_count(), "runs": runs}, indent=2))
PY
