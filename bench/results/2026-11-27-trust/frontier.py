#!/usr/bin/env python3
"""(c) The margin-fallback frontier, from the eval reports of this folder (`ragkv eval ... > X.json`).

Per finished cell, for `auto` and `blend` as run and as `MODE fallback<M` (M = 0, 0.02, 0.05, 0.1):
compute (`compute_fraction`: token-layers of every prefill pass over full's), TTFT ratio, recovery of
reuse's first-token KL and of its first-token damage with the report's 95 % bootstrap interval,
first-token agreement with full, and the fallbacks (count, share of the queries). Where the
records (`X.answers.jsonl.gz`) are here too, the fallback count is checked against the records:
the queries whose answer in MODE was composed and whose first step's top-2 gap is below M.

Usage: python3 frontier.py            (every 2026-11-27-trust-*.json of this folder)
"""
import glob, gzip, json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
MARGINS = ["0", "0.02", "0.05", "0.1"]
BASES = ["auto", "blend"]
CELLS = [("SmolLM2", "SQuAD 200", "squad200-smollm2"), ("Gemma 3", "SQuAD 200", "squad200-gemma3"),
         ("SmolLM2", "MuSiQue 150", "musique150-smollm2"), ("Gemma 3", "MuSiQue 150", "musique150-gemma3")]


def report(tag):
    p = os.path.join(HERE, f"2026-11-27-trust-{tag}.json")
    if not os.path.exists(p):
        return None
    return json.load(open(p))


def records(tag):
    p = os.path.join(HERE, f"2026-11-27-trust-{tag}.answers.jsonl.gz")
    if not os.path.exists(p):
        return None
    with gzip.open(p, "rt") as f:
        return [json.loads(l) for l in f if l.strip()]


def fallbacks_from_records(recs, mode, margin):
    n = 0
    for r in recs:
        mt = r["modes"][mode]["metrics"]
        m = mt.get("first_step_margin", -1.0)
        if mt.get("composed", False) and not mt.get("fallback", False) and m is not None and 0 <= m < margin:
            n += 1
    return n


def iv(x, nd=2):
    if x is None:
        return "–"
    return f"{x['mean']:.{nd}f} [{x['lo']:.{nd}f}, {x['hi']:.{nd}f}]"


def table(name, rep, recs):
    modes, q = rep["modes"], rep["queries"]
    out = [f"**{name}** ({q} questions; full's mean TTFT {modes['full']['ttft_ms'] / 1000:.2f} s)", "",
           "| mode | M | compute | TTFT ratio | TTFT ratio less unhidden KV reads | recovery KL | recovery first token | first token = full | fallbacks | composed share |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    # the KV reads not hidden under compute (load_ms − load_hidden_ms), per mode, over full's mean TTFT;
    # a fallback adds full's prefill, not reads, so its rows take the mode's figure
    unhidden = {}
    if recs is not None:
        for b in BASES + ["reuse"]:
            unhidden[b] = sum(r["modes"][b]["metrics"]["load_ms"] - r["modes"][b]["metrics"]["load_hidden_ms"]
                              for r in recs) / len(recs) / modes["full"]["ttft_ms"]
    less = lambda b, s: "–" if b not in unhidden else f"{s['ttft_ratio'] - unhidden[b]:.3f}"
    for rowname in ["reuse"]:
        s = modes[rowname]
        out.append(f"| {rowname} | – | {s['compute_fraction']:.3f} | {s['ttft_ratio']:.3f} | {less(rowname, s)} | 0 | 0 | "
                   f"{s['first_token_match']:.3f} | – | {s['composed_share']:.3f} |")
    for b in BASES:
        for m in [None] + MARGINS:
            key = b if m is None else f"{b} fallback<{m}"
            if key not in modes:
                continue
            s = modes[key]
            rec = s.get("recovery", {})
            fb = s.get("fallbacks", 0)
            out.append(f"| {b} | {'–' if m is None else m} | {s['compute_fraction']:.3f} | {s['ttft_ratio']:.3f} | {less(b, s)} | "
                       f"{iv(rec.get('kl'))} | {iv(rec.get('first_token'))} | {s['first_token_match']:.3f} | "
                       f"{'–' if m is None else f'{fb:.0f} ({fb / q:.3f})'} | {s['composed_share']:.3f} |")
            if recs is not None and m is not None:
                n = fallbacks_from_records(recs, b, float(m))
                if n != int(round(fb)):
                    notes.append(f"  ! {key}: report counts {fb:.0f} fallbacks, records give {n} composed answers with margin < {m}")
    if recs is not None:
        for b in BASES:
            comp = sum(1 for r in recs if r["modes"][b]["metrics"].get("composed", False))
            margins = sorted(r["modes"][b]["metrics"].get("first_step_margin", -1) for r in recs
                             if r["modes"][b]["metrics"].get("composed", False))
            med = margins[len(margins) // 2] if margins else float("nan")
            notes.append(f"  {b}: {comp} of {len(recs)} answers composed; their first-step margin median {med:.3f}; "
                         + ", ".join(f"< {m}: {sum(1 for x in margins if 0 <= x < float(m))}" for m in MARGINS[1:]))
    return out, notes


if __name__ == "__main__":
    for model, data, tag in CELLS:
        rep = report(tag)
        if rep is None:
            print(f"{model}, {data}: no report ({tag}), not run\n")
            continue
        lines, notes = table(f"{model}, {data}", rep, records(tag))
        print("\n".join(lines))
        print("\n".join(notes) if notes else "  (fallback counts match the records)")
        print()
