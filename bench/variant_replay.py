#!/usr/bin/env python3
"""Store growth under a variant budget (Cache-Craft §3.3): replays a query file through
`ragkv answer --write-back` on a store, samples the bytes of the store's variant files while it
runs, and reports as JSON: the budget, the largest variant bytes and count ever seen (never above
the budget), and per window of queries the share of reused chunks served from a non-canonical
variant and as an exact chain, the variants written, and the mean real compute fraction.

    bench/variant_replay.py --ragkv build/ragkv --store STORE --budget-variants 100 \\
        -- QUERIES.jsonl --index INDEX --top-k 5 --max-tokens 1 --mode auto

Everything after `--` goes to `ragkv answer` (which gets --store, --write-back and --out here).
The store must exist (`ragkv precompute`). --budget-variants/--budget-bytes, when given, are
written into STORE/craft.json as `precompute --max-variants/--variant-bytes` would; otherwise the
store's own budget applies."""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

VARIANT = re.compile(r"^[0-9a-f]{16}\.[0-9a-f]{16}\.rkv$")


def variant_usage(store):
    total = count = 0
    try:
        names = os.listdir(os.path.join(store, "kv"))
    except FileNotFoundError:
        return 0, 0
    for n in names:
        if VARIANT.match(n):
            try:
                total += os.path.getsize(os.path.join(store, "kv", n))
                count += 1
            except FileNotFoundError:
                pass  # evicted meanwhile
    return total, count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ragkv", default="build/ragkv")
    ap.add_argument("--store", required=True)
    ap.add_argument("--budget-variants", type=int, default=0)
    ap.add_argument("--budget-bytes", type=int, default=0)
    ap.add_argument("--window", type=int, default=100, help="queries per row of the time series")
    ap.add_argument("--out", default="replay.answers.jsonl")
    ap.add_argument("answer_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = [x for x in a.answer_args if x != "--"]

    settings_path = os.path.join(a.store, "craft.json")
    settings = {}
    if os.path.exists(settings_path):
        with open(settings_path) as f:
            settings = json.load(f)
    budget = settings.get("budget", {})
    if a.budget_variants or a.budget_bytes:
        budget = {"max_variants": a.budget_variants, "max_bytes": a.budget_bytes}
        settings["budget"] = budget
        settings.setdefault("format", "ragkv-craft-settings")
        tmp = settings_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(settings, f, indent=2)
        os.replace(tmp, settings_path)

    peak = {"bytes": 0, "count": 0, "samples": 0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            b, c = variant_usage(a.store)
            peak["bytes"] = max(peak["bytes"], b)
            peak["count"] = max(peak["count"], c)
            peak["samples"] += 1
            done.wait(0.2)

    t = threading.Thread(target=sample)
    t.start()
    t0 = time.time()
    cmd = [a.ragkv, "answer", *args, "--store", a.store, "--write-back", "--out", a.out]
    rc = subprocess.call(cmd)
    done.set()
    t.join()
    b, c = variant_usage(a.store)
    peak["bytes"] = max(peak["bytes"], b)
    peak["count"] = max(peak["count"], c)

    rows, cur = [], None
    with open(a.out) as f:
        for i, line in enumerate(f):
            m = json.loads(line)["metrics"]
            if i % a.window == 0:
                cur = {"first_query": i, "queries": 0, "chunks": 0, "variant": 0, "exact": 0, "written": 0, "real": 0.0}
                rows.append(cur)
            cur["queries"] += 1
            craft = m.get("craft", {})
            cur["chunks"] += len(craft.get("chunks", []))
            cur["variant"] += craft.get("variant_chunks", 0)
            cur["exact"] += craft.get("exact_chunks", 0)
            cur["written"] += m.get("variants_written", 0)
            cur["real"] += m.get("compute_fraction", m.get("real_compute_fraction")) or 0.0
    series = [{"queries": f"{r['first_query']}-{r['first_query'] + r['queries'] - 1}",
               "variant_hit_rate": r["variant"] / r["chunks"] if r["chunks"] else None,
               "exact_rate": r["exact"] / r["chunks"] if r["chunks"] else None,
               "variants_written": r["written"], "compute_fraction": r["real"] / r["queries"]} for r in rows]
    within = ((not budget.get("max_variants") or peak["count"] <= budget["max_variants"]) and
              (not budget.get("max_bytes") or peak["bytes"] <= budget["max_bytes"]))
    print(json.dumps({"exit_code": rc, "seconds": time.time() - t0, "budget": budget,
                      "peak_variant_bytes": peak["bytes"], "peak_variants": peak["count"],
                      "final_variant_bytes": b, "final_variants": c, "samples": peak["samples"],
                      "within_budget": within, "series": series}, indent=2))
    return rc


if __name__ == "__main__":
    sys.exit(main())
