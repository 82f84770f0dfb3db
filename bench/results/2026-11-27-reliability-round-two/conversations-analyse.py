import json, random, sys
def load(tag, m):
    return [json.loads(l) for l in open(f'cmp-{tag}-{m}.jsonl')]
def boot(xs, n=2000, seed=1):
    r = random.Random(seed); k = len(xs); ms = sorted(sum(r.choice(xs) for _ in range(k)) / k for _ in range(n))
    return ms[int(0.025 * n)], ms[int(0.975 * n)]
out = {}
for m in ['auto', 'blend']:
    for tag in ['before', 'after']:
        try: rows = load(tag, m)
        except FileNotFoundError: continue
        kl = [r['metrics']['kl_first_token_vs_full'] for r in rows]
        ftm = [1.0 if r['metrics'].get('first_token_match', r['answer'][:1] == r['full_answer'][:1]) else 0.0 for r in rows]
        f1 = [r['metrics']['f1_vs_full'] for r in rows]
        same = sum(r['answer'] == r['full_answer'] for r in rows)
        comp = sum(r['metrics']['computed_tokens'] for r in rows); pr = sum(r['metrics']['prefill_tokens'] for r in rows)
        over = sum(r['metrics']['computed_tokens'] > r['metrics']['prefill_tokens'] for r in rows)
        t2 = [r for r in rows if r['turn'] >= 2]
        kl2 = [r['metrics']['kl_first_token_vs_full'] for r in t2]
        res = dict(n=len(rows), kl=sum(kl)/len(kl), kl_ci=boot(kl), first_token=sum(ftm)/len(ftm), f1_vs_full=sum(f1)/len(f1),
                   f1_ci=boot(f1), identical=same, computed=comp, prompt=pr, computed_share=comp/pr, turns_over=over,
                   kl_turns_2_12=sum(kl2)/len(kl2))
        out[f'{tag}-{m}'] = res
        print(tag, m, {k: (round(v, 4) if isinstance(v, float) else (tuple(round(x, 4) for x in v) if isinstance(v, tuple) else v)) for k, v in res.items()})
json.dump(out, open('compare-summary.json', 'w'), indent=1)
