#!/usr/bin/env python3
"""Two `ragkv answer` runs of one query file side by side (A and B: e.g. conversations with and
without deduplication, or --batch 1 and --batch 8): per run the mean prompt and computed tokens
and gold F1/EM; paired, B - A for F1 with a bootstrap 95 % interval (resampling queries, 2,000
draws, seed 0); and how often the two runs give the same answer (token-level F1 between them as
SQuAD scores it). Prints one JSON object.

    python3 bench/answers_compare.py A.jsonl B.jsonl [--label-a dedup --label-b no-dedup]
"""
import argparse
import collections
import json
import random
import re
import string


def normalize(s):  # SQuAD's answer normalisation (lower, no punctuation, no articles, one space)
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1(pred, gold):
    p, g = normalize(pred).split(), normalize(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if common == 0:
        return 0.0
    prec, rec = common / len(p), common / len(g)
    return 2 * prec * rec / (prec + rec)


def read(path):
    return {r["id"]: r for r in (json.loads(line) for line in open(path) if line.strip())}


def mean(xs):
    return sum(xs) / len(xs) if xs else None


def interval(xs, draws=2000, seed=0):
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(xs[rng.randrange(n)] for _ in range(n)) / n for _ in range(draws))
    return [means[int(0.025 * draws)], means[int(0.975 * draws) - 1]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--label-a", default="a")
    ap.add_argument("--label-b", default="b")
    args = ap.parse_args()
    a, b = read(args.a), read(args.b)
    ids = [i for i in a if i in b]
    out = {"queries": len(ids)}
    for label, run in ((args.label_a, a), (args.label_b, b)):
        ms = [run[i]["metrics"] for i in ids]
        out[label] = {
            "prefill_tokens": mean([m["prefill_tokens"] for m in ms]),
            "computed_tokens": mean([m["computed_tokens"] for m in ms]),
            "f1": mean([m["f1"] for m in ms if "f1" in m]),
            "em": mean([m["em"] for m in ms if "em" in m]),
        }
    gold = [i for i in ids if "f1" in a[i]["metrics"] and "f1" in b[i]["metrics"]]
    diff = [b[i]["metrics"]["f1"] - a[i]["metrics"]["f1"] for i in gold]
    if diff:
        out["f1_diff_b_minus_a"] = {"mean": mean(diff), "ci95": interval(diff)}
    agree = [f1(b[i]["answer"], a[i]["answer"]) for i in ids]
    out["answer_f1_between"] = {"mean": mean(agree), "ci95": interval(agree)}
    out["identical_answers"] = sum(a[i]["answer"] == b[i]["answer"] for i in ids)
    ca, cb = out[args.label_a]["computed_tokens"], out[args.label_b]["computed_tokens"]
    if ca and cb:
        out["computed_tokens_b_over_a"] = cb / ca
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
