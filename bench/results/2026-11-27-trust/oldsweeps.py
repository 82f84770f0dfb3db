#!/usr/bin/env python3
"""The committed 2026-11-26 sweeps, re-read from their per-question records (.answers.jsonl.gz).

Each record's metrics carry `real_compute_fraction` (the old "real compute": recomputed token-layers
of the reused tokens over the reused tokens' token-layers) and `recompute_ratio` (computed
token-layers of every prefill pass over full's: what the ebc8129 binary calls `compute_fraction`).
Per mode: the means of both, the TTFT ratio (mean TTFT over full's mean TTFT, as the reports take
it), first-token agreement with full, first-token KL, and the recovery of reuse's damage
(D_reuse - D_mode) / D_reuse for the KL and for the first token, as `ragkv eval` computes them.
`check()` compares the figures against the committed .md report's table (to its rounding).
"""
import gzip, json, os, re

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.dirname(HERE)

# cell -> (records, md report) of the committed 2026-11-26 sweeps
SWEEPS = {
    ("SmolLM2", "SQuAD 200"): "2026-11-26-squad200-musique150/2026-11-26-sweep-squad200-smollm2",
    ("Gemma 3", "SQuAD 200"): "2026-11-26-squad200-musique150/2026-11-26-sweep-squad200-gemma3",
    ("SmolLM2", "MuSiQue 150"): "2026-11-26-tiled-attention-musique-sweep/2026-11-26-sweep-musique150-smollm2",
    ("Gemma 3", "MuSiQue 150"): "2026-11-26-squad200-musique150/2026-11-26-sweep-musique150-gemma3",
}


def mean(v):
    return sum(v) / len(v) if v else float("nan")


def load(stem):
    recs = []
    with gzip.open(os.path.join(RESULTS, stem + ".answers.jsonl.gz"), "rt") as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    return recs


def stats(stem):
    recs = load(stem)
    modes = sorted({m for r in recs for m in r["modes"]})
    per = {}
    for m in modes:
        real, comp, ttft, ft, kl, unhidden = [], [], [], [], [], []
        for r in recs:
            a, f = r["modes"][m], r["modes"]["full"]
            mt = a["metrics"]
            r_old = mt.get("reused_recompute_fraction", mt.get("real_compute_fraction"))  # ebc8129 renamed it
            if r_old is not None:
                real.append(r_old)
            comp.append(mt.get("compute_fraction", mt.get("recompute_ratio")))
            ttft.append(mt["ttft_ms"])
            unhidden.append(mt["load_ms"] - mt["load_hidden_ms"])
            ft.append(1.0 if a["output_ids"][:1] == f["output_ids"][:1] else 0.0)
            kl.append(a["kl_first_token_vs_baseline"])
        per[m] = dict(real_compute=mean(real) if real else None, compute=mean(comp), ttft_ms=mean(ttft),
                      first_token=mean(ft), kl=mean(kl), unhidden_load_ms=mean(unhidden), n=len(recs))
    base = per["full"]["ttft_ms"]
    ref = per["reuse"]
    for m, s in per.items():
        s["ttft_ratio"] = s["ttft_ms"] / base
        s["ttft_ratio_less_load"] = (s["ttft_ms"] - s["unhidden_load_ms"]) / base  # the KV reads not hidden under compute taken out
        s["recovery_kl"] = (ref["kl"] - s["kl"]) / ref["kl"]
        s["recovery_first_token"] = ((1 - ref["first_token"]) - (1 - s["first_token"])) / (1 - ref["first_token"])
    return per


def md_rows(stem):
    """mode -> {real compute, recompute (prompt), TTFT ratio, recovery KL, recovery first token} from the .md table."""
    rows, head = {}, None
    for line in open(os.path.join(RESULTS, stem + ".md")):
        if not line.startswith("| "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "mode":
            head = cells
            continue
        if head and not set(cells[0]) <= set("-") and len(cells) == len(head):
            rows.setdefault(cells[0], dict(zip(head, cells)))
    return rows


def check(stem, per):
    """Every figure against the committed report's table, to the table's rounding."""
    rows, bad = md_rows(stem), []
    for m, s in per.items():
        r = rows.get(m)
        if r is None:
            bad.append(f"{m}: not in the .md table")
            continue
        pairs = [("real compute", s["real_compute"], 3), ("recompute (prompt)", s["compute"], 3),
                 ("TTFT ratio", s["ttft_ratio"], 3), ("first token", s["first_token"], 3),
                 ("recovery KL", s["recovery_kl"] if m != "full" else 1.0, 2),
                 ("recovery first token", s["recovery_first_token"] if m != "full" else 1.0, 2)]
        for col, v, nd in pairs:
            cell = r[col].split(" ")[0]
            if cell in ("–", "-") or v is None:
                continue
            if abs(float(cell) - v) > 0.5 * 10 ** -nd + 1e-9:
                bad.append(f"{m} {col}: report {cell}, records {v:.{nd + 2}f}")
    return bad


if __name__ == "__main__":
    for cell, stem in SWEEPS.items():
        per = stats(stem)
        print(cell, stem, "check:", check(stem, per) or "all figures match the .md table")
