#!/usr/bin/env python3
"""How decided full recompute's first token is, and where the modes change it.

Reads the baseline's first-step logits that `ragkv eval --baseline-cache FILE` keeps (one JSONL
entry per prompt, "first_logits" = base64 of little-endian f32) and an eval answers file of the
same prompts (`--answers`, any --max-tokens); prints, for all questions and for each mode's
changed first tokens, how many sit where full's top-2 probability gap is below 0.05 / 0.1 / 0.2.
A first token a mode changes at a small gap is a near-tie of full's own distribution.

Analysis only (bench/results); standard library only.

  python3 scripts/first_token_margins.py BASELINE_CACHE.jsonl ANSWERS.jsonl
"""
import base64
import heapq
import json
import math
import struct
import sys

THRESHOLDS = (0.05, 0.1, 0.2)


def top2_gap(logits_b64):
    raw = base64.b64decode(logits_b64)
    x = struct.unpack("<%df" % (len(raw) // 4), raw)
    m = max(x)
    z = sum(math.exp(v - m) for v in x)
    first, second = heapq.nlargest(2, range(len(x)), key=x.__getitem__)
    return first, (math.exp(x[first] - m) - math.exp(x[second] - m)) / z


def counts(gaps):
    return ", ".join(f"< {t}: {sum(g < t for g in gaps)}" for t in THRESHOLDS)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    gap, top = {}, {}
    for line in open(sys.argv[1]):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a cut last line
        top[entry["id"]], gap[entry["id"]] = top2_gap(entry["first_logits"])
    records = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
    records = [r for r in records if r["id"] in gap]
    first = lambda r, mode: r["modes"][mode]["output_ids"][0]
    same = sum(top[r["id"]] == first(r, "full") for r in records)
    gaps = sorted(gap[r["id"]] for r in records)
    print(f"{len(records)} questions with logits; full's first token equal in both files: {same}")
    print(f"all questions: gap {counts(gaps)}; median {gaps[len(gaps) // 2]:.3f}")
    for mode in records[0]["modes"]:
        if mode == "full":
            continue
        changed = [r for r in records if first(r, mode) != first(r, "full")]
        newly = [r for r in changed if first(r, "reuse") == first(r, "full")]
        print(f"{mode:22s} changed {len(changed):3d}: gap {counts([gap[r['id']] for r in changed])}"
              f" | of them reuse kept {len(newly)}: gap {counts([gap[r['id']] for r in newly])}")


if __name__ == "__main__":
    main()
