#!/usr/bin/env python3
"""Joins two eval record files of the same questions and store, modes side by side, for paired
comparisons across runs: every query's full answer must be the same in both (bit-identical first
token and output ids: the same numerics), else it stops. TTFTs come from different runs: ADD's are
scaled by (sum of BASE's full TTFTs) / (sum of ADD's), so each mode keeps its own run's ratio to full.

  python3 merge_records.py BASE.jsonl[.gz] ADD.jsonl[.gz] PREFIX > MERGED.jsonl
  (ADD's modes other than full and reuse are added as PREFIX + name, e.g. 'final:auto')"""
import gzip, json, sys

def load(path):
    f = gzip.open(path, 'rt') if path.endswith('.gz') else open(path)
    return {r['id']: r for r in map(json.loads, f) if r.get('modes')}

base, add, prefix = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
if set(base) != set(add):
    sys.exit(f"the files answer different questions ({len(base)} and {len(add)}; {len(set(base) ^ set(add))} differ)")
scale = sum(r['modes']['full']['metrics']['ttft_ms'] for r in base.values()) / \
    sum(r['modes']['full']['metrics']['ttft_ms'] for r in add.values())
for qid, r in base.items():
    a = add[qid]
    if r['modes']['full']['output_ids'] != a['modes']['full']['output_ids']:
        sys.exit(f"{qid}: full's output differs between the runs: not the same numerics")
    for m, v in a['modes'].items():
        if m not in ('full', 'reuse'):
            v['metrics']['ttft_ms'] *= scale
            r['modes'][prefix + m] = v
    print(json.dumps(r))
