#!/usr/bin/env python3
"""(a) Before/after accounting: the old figure (recomputed token-layers of the reused tokens over
their token-layers; `real_compute_fraction`, now `reused_recompute_fraction`) beside the new one
(`compute_fraction`: token-layers of every prefill pass, prophet's question pass included, over
full's; `recompute_ratio` in the 2026-11-26 records), with the TTFT ratio.

Rows: `auto` and `blend` from this folder's eval reports (2026-11-27-trust-*.json, binary ebc8129),
and blend/kv, blend/prophet, blend/random at nominal 0.2 from the committed 2026-11-26 sweeps,
re-read from their records (oldsweeps.py checks them against their .md tables).

Then (b): prophet vs kv vs random at equal measured compute, from the same sweeps: each method's
recovery of first-token KL and of the first token, linearly interpolated in the new compute between
its measured points at nominal 0.1/0.2/0.3, at three compute levels inside every method's range.
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oldsweeps  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TAGS = {("SmolLM2", "SQuAD 200"): "squad200-smollm2", ("Gemma 3", "SQuAD 200"): "squad200-gemma3",
        ("SmolLM2", "MuSiQue 150"): "musique150-smollm2", ("Gemma 3", "MuSiQue 150"): "musique150-gemma3"}
METHODS = ["kv", "prophet", "random"]


def f3(x):
    return "–" if x is None else f"{x:.3f}"


def table_a():
    print("| cell | mode | source | old figure: recomputed share of the reused tokens | new: compute, every pass, over full's | new − old | TTFT ratio | TTFT ratio less unhidden KV reads |")
    print("|---|---|---|---|---|---|---|---|")
    for cell, stem in oldsweeps.SWEEPS.items():
        name = f"{cell[0]}, {cell[1]}"
        p = os.path.join(HERE, f"2026-11-27-trust-{TAGS[cell]}.json")
        if os.path.exists(p):
            modes = json.load(open(p))["modes"]
            new_per = oldsweeps.stats("2026-11-27-trust/2026-11-27-trust-" + TAGS[cell])
            for m in ["auto", "blend"]:
                s = modes[m]
                old, new = s.get("reused_recompute_fraction"), s["compute_fraction"]
                print(f"| {name} | {m} | 2026-11-27, ebc8129 | {f3(old)} | {f3(new)} | "
                      f"{'–' if old is None else f'{new - old:+.3f}'} | {s['ttft_ratio']:.3f} | "
                      f"{new_per[m]['ttft_ratio_less_load']:.3f} |")
        per = oldsweeps.stats(stem)
        for meth in METHODS:
            m = f"blend/{meth}@0.2"
            if m in per:
                s = per[m]
                print(f"| {name} | {m} | 2026-11-26 sweep | {f3(s['real_compute'])} | {f3(s['compute'])} | "
                      f"{s['compute'] - s['real_compute']:+.3f} | {s['ttft_ratio']:.3f} | {s['ttft_ratio_less_load']:.3f} |")


def interp(points, x):
    """points: [(compute, value)] sorted by compute; linear between neighbours; None outside."""
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y0
    return None


def table_b(xkey="compute", xlabel="compute (new)"):
    print(f"| cell | {xlabel} | recovery KL: kv / prophet / random | recovery first token: kv / prophet / random |")
    print("|---|---|---|---|")
    for cell, stem in oldsweeps.SWEEPS.items():
        per = oldsweeps.stats(stem)
        curves = {}
        for meth in METHODS:
            pts = sorted((per[m][xkey], per[m]) for m in per if m.startswith(f"blend/{meth}@"))
            if len(pts) >= 2:
                curves[meth] = pts
        # three levels inside every interpolable method's measured range, at 1/6, 1/2, 5/6 of the
        # common range, rounded to 0.01
        lo = max(p[0][0] for p in curves.values())
        hi = min(p[-1][0] for p in curves.values())
        levels = sorted({round(lo + (hi - lo) * f, 2) for f in (1 / 6, 1 / 2, 5 / 6)})
        levels = [l for l in levels if lo <= l <= hi]
        name = f"{cell[0]}, {cell[1]}"

        def at(x, key):
            vals = []
            for meth in METHODS:
                v = interp([(c, s[key]) for c, s in curves[meth]], x) if meth in curves else None
                vals.append("–" if v is None else f"{v:.2f}")
            return " / ".join(vals)

        for x in levels:
            print(f"| {name} | {x:.2f} | {at(x, 'recovery_kl')} | {at(x, 'recovery_first_token')} |")
        # a method measured at one point only (Gemma 3 MuSiQue: random@0.2): the others at its compute
        for meth in METHODS:
            if meth in curves:
                continue
            for m in sorted(k for k in per if k.startswith(f"blend/{meth}@")):
                x = per[m][xkey]
                kl, ft = at(x, "recovery_kl").split(" / "), at(x, "recovery_first_token").split(" / ")
                i = METHODS.index(meth)
                kl[i], ft[i] = f"{per[m]['recovery_kl']:.2f}", f"{per[m]['recovery_first_token']:.2f}"
                print(f"| {name} | {x:.3f} ({m}'s one measured point) | {' / '.join(kl)} | {' / '.join(ft)} |")
    if xkey != "compute":
        return
    print()
    print("Measured points (new compute → recovery KL / first token; TTFT ratio):")
    for cell, stem in oldsweeps.SWEEPS.items():
        per = oldsweeps.stats(stem)
        pts = "; ".join(f"{m.split('/')[1]} {per[m]['compute']:.3f} → {per[m]['recovery_kl']:.2f} / "
                        f"{per[m]['recovery_first_token']:.2f}; {per[m]['ttft_ratio']:.3f}"
                        for m in sorted(per) if m.startswith("blend/"))
        print(f"- {cell[0]}, {cell[1]}: {pts}")


if __name__ == "__main__":
    print("(a) before/after accounting\n")
    table_a()
    print("\n(b) prophet vs kv vs random at equal new compute (linear interpolation between measured points)\n")
    table_b()
    print("\n(b') the same at equal TTFT ratio (the 2026-11-26 runs' own timings), for comparison\n")
    table_b("ttft_ratio", "TTFT ratio")
