#!/usr/bin/env python3
"""Issue 39's "not worse than the best fixed mode" check from one eval's records: a candidate mode
under a margin-fallback rule (derived as eval derives it: a query the rule sends back takes full's
first token and KL 0, and adds the rows after its exact prefix to the compute and full's TTFT)
against every plain mode whose TTFT ratio is at most the candidate's: the paired bootstrap 95 %
interval of (candidate − mode) for the recovery of first-token KL and of first-token agreement.

  python3 frontier_check.py RECORDS.jsonl MODE M/C   (e.g. craft/prophet@0.15 0/0.05)"""
import json, random, sys

recs = [json.loads(l) for l in open(sys.argv[1])]
cand, rule = sys.argv[2], sys.argv[3]
M, C = (list(map(float, rule.split('/'))) + [0.0])[:2] if '/' in rule else (float(rule), 0.0)

def first(r, m):
    ids = r['modes'][m]['output_ids']
    return ids[0] if ids else -1

def per_query(m, with_rule):
    out = []
    for r in recs:
        a, mt, full = r['modes'][m], r['modes'][m]['metrics'], r['modes']['full']['metrics']
        kl, agree = a['kl_first_token_vs_baseline'], first(r, m) == first(r, 'full')
        compute, ttft = mt['compute_fraction'], mt['ttft_ms']
        gap, moved = mt.get('first_step_margin', -1), mt.get('repair_moved_first_token', False)
        if with_rule and mt.get('composed') and gap >= 0 and (gap < M or (moved and gap < C)):
            kl, agree = 0.0, True
            compute += 1 - mt['exact_prefix_tokens'] / mt['prefill_tokens']
            ttft += full['ttft_ms']
        out.append((kl, 0.0 if agree else 1.0, compute, ttft, full['ttft_ms']))
    return out

ref = per_query('reuse', False)
def recov(rows, idx):
    d_ref = [sum(ref[i][k] for i in idx) for k in (0, 1)]
    d = [sum(rows[i][k] for i in idx) for k in (0, 1)]
    return [1 - d[k] / d_ref[k] if d_ref[k] > 0 else float('nan') for k in (0, 1)]
def ttft_ratio(rows):
    return sum(r[3] for r in rows) / sum(r[4] for r in rows)

n = len(recs)
c = per_query(cand, True)
print(f"{cand} fallback<{rule}: compute {sum(r[2] for r in c)/n:.3f}, TTFT ratio {ttft_ratio(c):.3f}, "
      f"recovery KL {recov(c, range(n))[0]:.3f}, first token {recov(c, range(n))[1]:.3f}")
random.seed(1)
draws = [[random.randrange(n) for _ in range(n)] for _ in range(2000)]
for m in [k for k in recs[0]['modes'] if k not in ('full', 'reuse')]:
    rows = per_query(m, False)
    if ttft_ratio(rows) > ttft_ratio(c) or m == cand and rule in ('0', '0/0'):
        continue
    diffs = [[a - b for a, b in zip(recov(c, d), recov(rows, d))] for d in draws]
    ci = lambda k: sorted(x[k] for x in diffs)
    lo_hi = lambda k: (ci(k)[50], ci(k)[1949])
    point = [a - b for a, b in zip(recov(c, range(n)), recov(rows, range(n)))]
    print(f"  − {m:22s} (TTFT {ttft_ratio(rows):.3f}): KL {point[0]:+.3f} [{lo_hi(0)[0]:+.3f}, {lo_hi(0)[1]:+.3f}], "
          f"first token {point[1]:+.3f} [{lo_hi(1)[0]:+.3f}, {lo_hi(1)[1]:+.3f}]")
