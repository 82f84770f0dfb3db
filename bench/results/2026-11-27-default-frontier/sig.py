import json, sys
L=[json.loads(l) for l in open(sys.argv[1]) if l.strip().endswith('}')]
n=len(L); print(n, 'queries')
ft=lambda r,m: r['modes'][m]['output_ids'][0] if r['modes'][m]['output_ids'] else -1
ar=sum(ft(r,'reuse')==ft(r,'full') for r in L)/n
klr=sum(r['modes']['reuse']['kl_first_token_vs_baseline'] for r in L)/n
for m in [k for k in L[0]['modes'] if k not in ('full',)]:
    a=sum(ft(r,m)==ft(r,'full') for r in L)/n
    c=sum(r['modes'][m]['metrics']['compute_fraction'] for r in L)/n
    kl=sum(r['modes'][m]['kl_first_token_vs_baseline'] for r in L)/n
    t=sum(r['modes'][m]['metrics']['ttft_ms'] for r in L)/sum(r['modes']['full']['metrics']['ttft_ms'] for r in L)
    mv=[r for r in L if r['modes'][m]['metrics'].get('repair_moved_first_token')]
    dis=[r for r in L if ft(r,m)!=ft(r,'full')]
    print(f"{m:22s} agree {a:.3f} rec {(a-ar)/(1-ar) if ar<1 else 0:.2f} KLrec {(klr-kl)/klr:.3f} comp {c:.3f} ttft {t:.3f} moved {len(mv)} disagree {len(dis)} moved&dis {sum(1 for r in dis if r['modes'][m]['metrics'].get('repair_moved_first_token'))}")
