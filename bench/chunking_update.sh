#!/usr/bin/env bash
# What an edit costs precompute, fixed vs content chunking: the first ARTICLES (default 5) of the
# joined SQuAD articles that bench/chunking_compare.py wrote to DIR (v1.jsonl, and v2.jsonl with
# one sentence inserted per article). Per chunking: build-index v1, precompute it (no variants),
# bring the index to v2 (content: build-index --update; fixed: the same), precompute v2 into the
# same store; prints each precompute's computed chunks and tokens as JSON lines.
#   bench/chunking_update.sh DIR [ARTICLES]
set -euo pipefail
dir=$(cd "$1" && pwd)
n=${2:-5}
ragkv="$(cd "$(dirname "$0")/.." && pwd)/build/ragkv"
out="$dir/update-$n"
rm -rf "$out"; mkdir -p "$out"
head -n "$n" "$dir/v1.jsonl" > "$out/v1.jsonl"
head -n "$n" "$dir/v2.jsonl" > "$out/v2.jsonl"
for chunking in fixed content; do
  "$ragkv" build-index --corpus "$out/v1.jsonl" --out "$out/$chunking-index" --chunking "$chunking" > /dev/null 2>&1
  first=$("$ragkv" precompute --index "$out/$chunking-index" --store "$out/$chunking-store" --neighbours 0 2>/dev/null)
  update=$("$ragkv" build-index --corpus "$out/v2.jsonl" --out "$out/$chunking-index" --update 2>/dev/null)
  second=$("$ragkv" precompute --index "$out/$chunking-index" --store "$out/$chunking-store" --neighbours 0 2>/dev/null)
  python3 - "$chunking" "$first" "$update" "$second" <<'PY'
import json, sys
c, a, u, b = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
print(json.dumps({"chunking": c, "v1": {"chunks": a["computed"], "tokens": a["tokens"], "seconds": a["seconds"]},
                  "update": u["update"], "update_seconds": u["seconds"],
                  "v2": {"computed": b["computed"], "skipped": b["skipped"], "tokens": b["tokens"], "seconds": b["seconds"]}}))
PY
done
