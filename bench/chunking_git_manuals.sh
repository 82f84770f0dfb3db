#!/usr/bin/env bash
# Chunk survival between two releases of git's manual pages (Documentation/git-*.txt), fixed vs
# content chunking: the share of the newer release's chunks (and tokens) whose id and text — so
# cache key — the older release's index already had. The pages come from a clone of git/git
# (GIT_DIR, e.g. the mirror the search tool's fetch brings); none of it is committed.
#   bench/chunking_git_manuals.sh GIT_DIR OUT [OLD_TAG NEW_TAG]   (default v2.44.0 v2.45.0)
set -euo pipefail
git_dir=$1
out=$(mkdir -p "$2" && cd "$2" && pwd)
old=${3:-v2.44.0}
new=${4:-v2.45.0}
ragkv="$(cd "$(dirname "$0")/.." && pwd)/build/ragkv"
for tag in "$old" "$new"; do
  rm -rf "$out/$tag"; mkdir -p "$out/$tag"
  git --git-dir="$git_dir" archive "$tag" Documentation | tar -x -C "$out/$tag" --wildcards 'Documentation/git-*.txt'
done
for chunking in fixed content; do
  for tag in "$old" "$new"; do
    [ -f "$out/$chunking-$tag/manifest.json" ] || \
      "$ragkv" build-index --corpus "$out/$tag/Documentation" --out "$out/$chunking-$tag" --chunking "$chunking" > /dev/null 2>&1
  done
done
python3 - "$out" "$old" "$new" <<'PY'
import json, os, sys
out, old, new = sys.argv[1:]
def chunks(d): return [json.loads(l) for l in open(os.path.join(out, d, "chunks.jsonl"))]
res = {"old": old, "new": new}
for c in ("fixed", "content"):
    a, b = chunks(f"{c}-{old}"), chunks(f"{c}-{new}")
    known = {(x["id"], x["text"]) for x in a}
    kept = [x for x in b if (x["id"], x["text"]) in known]
    res[c] = {"pages": len({x["doc"] for x in b}), "chunks_old": len(a), "chunks_new": len(b),
              "unchanged_chunks": len(kept), "unchanged_share": len(kept) / len(b),
              "tokens_new": sum(x["n_tokens"] for x in b),
              "unchanged_token_share": sum(x["n_tokens"] for x in kept) / sum(x["n_tokens"] for x in b),
              "pages_changed": len({x["doc"] for x in b} - {x["doc"] for x in kept} | {x["doc"] for x in b if (x["id"], x["text"]) not in known})}
print(json.dumps(res, indent=2))
PY
