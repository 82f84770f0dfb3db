#!/usr/bin/env python3
"""Quantised chunk caches against f16 caches, paired per query: reads the
`ragkv eval --answers` records of the same queries run on an f16 store and on quantised stores
(same binary, same baseline cache, same modes) and prints one JSON object: per store and mode, the
first-token KL to the baseline and agreement with it (eval's own numbers), and per quantised store
and mode the paired differences against the f16 store — mean KL difference with a paired bootstrap
95 % interval, the share of queries whose first output token and whose whole output equal the f16
store's. eval's report gives each store's own intervals; this adds the pairing across stores.

    python3 bench/kvq_compare.py --f16 F16.answers.jsonl --store q8=Q8.answers.jsonl \\
        --store q4=Q4.answers.jsonl [--bootstrap 2000] [--seed 1]
"""
import argparse
import json
import random
import sys


def load(path):
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: {e}")
            out[r["id"]] = r
    return out


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def bootstrap_mean(xs, reps, rng):
    n = len(xs)
    means = sorted(mean([xs[rng.randrange(n)] for _ in range(n)]) for _ in range(reps))
    return [means[int(0.025 * reps)], means[int(0.975 * reps) - 1]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--f16", required=True, help="answers of the f16 store")
    ap.add_argument("--store", action="append", default=[], help="NAME=answers of a quantised store")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    base = load(a.f16)
    stores = {"f16": base}
    for s in a.store:
        name, _, path = s.partition("=")
        if not path:
            sys.exit(f"--store {s}: expected NAME=FILE")
        stores[name] = load(path)
    ids = sorted(set.intersection(*(set(s) for s in stores.values())))
    if not ids:
        sys.exit("no query is answered in every file")
    modes = sorted(set.intersection(*(set(stores[n][i]["modes"]) for n in stores for i in ids)))
    report = {"queries": len(ids), "modes": modes, "stores": {}, "paired_vs_f16": {}}
    for name, recs in stores.items():
        report["stores"][name] = {}
        for m in modes:
            kl = [recs[i]["modes"][m]["kl_first_token_vs_baseline"] for i in ids]
            baseline = recs[ids[0]]["settings"]["baseline"]
            agree = mean([float(recs[i]["modes"][m]["output_ids"][:1] == recs[i]["modes"][baseline]["output_ids"][:1])
                          for i in ids])
            report["stores"][name][m] = {"kl_first_token": mean(kl), "first_token_agreement": agree,
                                         "load_ms": mean([recs[i]["modes"][m]["metrics"]["load_ms"] for i in ids])}
    for name, recs in stores.items():
        if name == "f16":
            continue
        report["paired_vs_f16"][name] = {}
        for m in modes:
            d = [recs[i]["modes"][m]["kl_first_token_vs_baseline"] - base[i]["modes"][m]["kl_first_token_vs_baseline"]
                 for i in ids]
            first = [float(recs[i]["modes"][m]["output_ids"][:1] == base[i]["modes"][m]["output_ids"][:1]) for i in ids]
            same = [float(recs[i]["modes"][m]["output_ids"] == base[i]["modes"][m]["output_ids"]) for i in ids]
            report["paired_vs_f16"][name][m] = {
                "kl_difference": mean(d),
                "kl_difference_ci95": bootstrap_mean(d, a.bootstrap, rng),
                "first_token_same_as_f16": mean(first),
                "output_same_as_f16": mean(same),
            }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
