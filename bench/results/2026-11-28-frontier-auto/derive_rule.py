#!/usr/bin/env python3
"""One mode under a margin-fallback rule, derived from eval records as eval derives it (a query the
rule sends back takes full's answer, adds the rows after its exact prefix to the compute and full's
TTFT to its own): compute, TTFT ratio, recovery of first-token KL and of the first token with
paired bootstrap 95 % intervals (2,000 draws), first-token agreement, fallbacks.

  python3 derive_rule.py RECORDS.jsonl[.gz] MODE M/C   (e.g. auto 0.003/0.02)"""
import gzip, json, random, sys

path, mode, rule = sys.argv[1:4]
M, C = (list(map(float, rule.split('/'))) + [0.0])[:2] if '/' in rule else (float(rule), 0.0)
f = gzip.open(path, 'rt') if path.endswith('.gz') else open(path)
recs = [r for r in map(json.loads, f) if r.get('modes')]
first = lambda a: a['output_ids'][0] if a['output_ids'] else -1
rows, fallbacks = [], 0
for r in recs:
    a, full, reuse = r['modes'][mode], r['modes']['full'], r['modes']['reuse']
    mt = a['metrics']
    kl, dis = a['kl_first_token_vs_baseline'], float(first(a) != first(full))
    compute, ttft = mt['compute_fraction'], mt['ttft_ms']
    gap, moved = mt.get('first_step_margin', -1), mt.get('repair_moved_first_token', False)
    if mt.get('composed') and gap >= 0 and (gap < M or (moved and gap < C)):
        kl, dis, fallbacks = 0.0, 0.0, fallbacks + 1
        compute += 1 - mt['exact_prefix_tokens'] / mt['prefill_tokens']
        ttft += full['metrics']['ttft_ms']
    rdis = float(first(reuse) != first(full))
    rows.append((kl, dis, reuse['kl_first_token_vs_baseline'], rdis, compute, ttft, full['metrics']['ttft_ms']))
n = len(rows)
def rec(idx):
    s = [sum(rows[i][k] for i in idx) for k in range(4)]
    return [1 - s[0] / s[2] if s[2] else float('nan'), 1 - s[1] / s[3] if s[3] else float('nan')]
random.seed(1)
draws = sorted(zip(*[rec([random.randrange(n) for _ in range(n)]) for _ in range(2000)]), key=lambda x: 0)
ci = [sorted(d) for d in draws]
point = rec(range(n))
print(f"{mode} fallback<{rule}: compute {sum(r[4] for r in rows) / n:.3f}, TTFT ratio "
      f"{sum(r[5] for r in rows) / sum(r[6] for r in rows):.3f}, recovery KL {point[0]:.3f} [{ci[0][50]:.3f}, {ci[0][1949]:.3f}], "
      f"first token {point[1]:.3f} [{ci[1][50]:.3f}, {ci[1][1949]:.3f}], first token = full "
      f"{1 - sum(r[1] for r in rows) / n:.3f}, fallbacks {fallbacks} of {n}")
