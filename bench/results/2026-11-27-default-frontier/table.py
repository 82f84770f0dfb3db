#!/usr/bin/env python3
"""One eval summary (JSON) as a table: every mode and derived fallback rule, with compute (every
pass counted), TTFT ratio, recoveries of first-token KL and of the first token (95 % paired
bootstrap), first-token agreement and fallbacks; marks the rows meeting issue 39's targets."""
import json, sys
for path in sys.argv[1:]:
    s = json.load(open(path))
    n = s['queries']
    print(f"## {path} ({n} queries)\n")
    print("| mode | compute | TTFT ratio | recovery KL | recovery first token | first token = full | fallbacks | targets |")
    print("|---|---|---|---|---|---|---|---|")
    for name in s['mode_order']:
        m = s['modes'][name]
        rec = m.get('recovery') or {}
        def ci(k):
            r = rec.get(k)
            return f"{r['mean']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]" if r and r.get('mean') is not None else "–"
        c = m.get('compute_fraction') or 0
        ok = (rec.get('first_token', {}).get('mean') or 0) >= 0.8 and (rec.get('kl', {}).get('mean') or 0) >= 0.9 \
            and c <= 0.20 and m['ttft_ratio'] <= 0.30
        print(f"| {name} | {c:.3f} | {m['ttft_ratio']:.3f} | {ci('kl')} | {ci('first_token')} | "
              f"{m['first_token_match']:.3f} | {int(m.get('fallbacks', 0))} | {'**met**' if ok else ''} |")
    print()
