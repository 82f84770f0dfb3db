#!/usr/bin/env python3
"""Edited-chunk KV reuse on git's manual pages (core/rag/donor-reuse.h): the update of a store
from one release's pages to the next, with donor reuse, without, and from scratch; and the
fidelity of answers over the new release against `full`.

  bench/donor_git_manuals.py GIT_DIR OUT QUESTIONS [--old v2.44.0 --new v2.45.0]

GIT_DIR: a clone of git/git (e.g. the mirror the search tool's fetch brings); none of it is
committed. The corpus is every Documentation/git-*.txt page that changed between the two tags
(the pages an update touches), at both tags. For each chunking (content, fixed):
  1. build-index at OLD, precompute (canonical caches only: --neighbours 0) -> base store;
  2. build-index --update to NEW;
  3. precompute NEW into copies of the base store: donor reuse (repair 0.15), donor unrepaired
     (repair 0: only the changed tokens computed), donor reuse off (changed chunks computed
     whole); and into an empty store (from scratch). Token-layers and wall time of each.
Fidelity (content chunking): `eval QUESTIONS --modes reuse,auto` on the three updated stores,
every mode against full (the same prompts: full does not read the store). Per store and mode:
first-token KL and agreement with full, answer F1 vs full; KL recovery relative to the
unrepaired donor store, 1 - sum KL(S) / sum KL(unrepaired); the paired bootstrap (2,000 resamples
of the questions) of recovery(donor) - recovery(off), whose lower end is the non-inferiority bound.
KV error (content chunking): each donor-built chunk's K and V against the chunk computed whole,
relative squared error on layers 15 and the last, repaired and unrepaired, and the share the repair
removes.
Retrieval: gold page in the top 5 and answer string in the top 5 for QUESTIONS, on indexes of
all of NEW's git-*.txt pages, content vs fixed chunking.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RAGKV = os.environ.get("RAGKV", os.path.join(ROOT, "build", "ragkv"))  # a copy, to rebuild meanwhile


def run(*args, gate=False):
    """ragkv's last JSON line and the wall time; gate: exit 1 is eval's verdict (a mode failed), not an error."""
    t = time.time()
    r = subprocess.run([RAGKV, *args], capture_output=True, text=True)
    if r.returncode not in ((0, 1) if gate else (0,)):
        sys.exit(f"ragkv {' '.join(args)}: exit {r.returncode}: {r.stderr[-2000:]}")
    lines = [l for l in r.stdout.splitlines() if l.startswith("{") and l.rstrip().endswith("}")]
    return (json.loads(lines[-1]) if lines else None), time.time() - t  # (eval prints its report: None)


def export(git_dir, tag, pages, dest):
    os.makedirs(dest, exist_ok=True)
    for p in pages:
        blob = subprocess.run(["git", "--git-dir", git_dir, "show", f"{tag}:{p}"], capture_output=True)
        if blob.returncode == 0:
            with open(os.path.join(dest, os.path.basename(p)), "wb") as f:
                f.write(blob.stdout)


def copy_store(src, dst):
    """Hard links for the cache files (never modified in place: writers rename), copies for the rest."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(os.path.join(dst, "kv"))
    for name in os.listdir(src):
        if name != "kv" and os.path.isfile(os.path.join(src, name)):
            shutil.copy2(os.path.join(src, name), dst)
    for name in os.listdir(os.path.join(src, "kv")):
        os.link(os.path.join(src, "kv", name), os.path.join(dst, "kv", name))


def update_cost(out, chunking, old_dir, new_dir):
    d = os.path.join(out, chunking)
    os.makedirs(d, exist_ok=True)
    idx, base = os.path.join(d, "index"), os.path.join(d, "store-base")
    res = {}
    if not os.path.exists(os.path.join(base, "store.json")):
        shutil.rmtree(idx, ignore_errors=True)
        run("build-index", "--corpus", old_dir, "--out", idx, "--chunking", chunking)
        res["base"], _ = run("precompute", "--index", idx, "--store", base, "--neighbours", "0")
        res["update_index"], _ = run("build-index", "--corpus", new_dir, "--out", idx, "--update")
    variants = {"donor": ["--donor-repair", "0.15"], "unrepaired": ["--donor-repair", "0"], "off": ["--donor-reuse", "off"]}
    for name, flags in variants.items():
        store = os.path.join(d, f"store-{name}")
        copy_store(base, store)
        s, wall = run("precompute", "--index", idx, "--store", store, "--neighbours", "0", *flags)
        res[name] = {"computed_chunks": s["computed"], "unchanged_chunks": s["skipped"], "from_donor": s["from_donor"],
                     "tokens": s["tokens"], "token_layers": s["token_layers"],
                     "donor_shared_tokens": s["donor_shared_tokens"], "donor_repaired_tokens": s["donor_repaired_tokens"],
                     "seconds": s["seconds"], "wall_s": wall}
    scratch = os.path.join(d, "store-scratch")
    shutil.rmtree(scratch, ignore_errors=True)
    s, wall = run("precompute", "--index", idx, "--store", scratch, "--neighbours", "0")
    res["scratch"] = {"computed_chunks": s["computed"], "tokens": s["tokens"], "token_layers": s["token_layers"],
                      "seconds": s["seconds"], "wall_s": wall}
    shutil.rmtree(scratch, ignore_errors=True)
    return res


def f1(a, b):
    ta, tb = a.lower().split(), b.lower().split()
    common = sum(min(ta.count(w), tb.count(w)) for w in set(ta))
    if not ta or not tb or common == 0:
        return float(ta == tb)
    p, r = common / len(ta), common / len(tb)
    return 2 * p * r / (p + r)


def fidelity(out, questions, boot=2000, seed=7):
    d = os.path.join(out, "content")
    idx = os.path.join(d, "index")
    rows = {}
    for name in ("donor", "unrepaired", "off"):
        ans = os.path.join(d, f"answers-{name}.jsonl")
        if not os.path.exists(ans):
            run("eval", questions, "--index", idx, "--store", os.path.join(d, f"store-{name}"), "--modes", "reuse,auto",
                "--answers", ans, "--report", os.path.join(d, f"report-{name}.json"), gate=True)
        rows[name] = {r["id"]: r for r in map(json.loads, open(ans))}
    ids = sorted(rows["donor"])
    res = {"questions": len(ids)}
    donor_chunks = sum(1 for i in ids for p in rows["donor"][i]["modes"]["reuse"]["metrics"]["provenance"]
                       if p["source"] == "donor")
    res["retrieved_chunks"] = sum(len(rows["donor"][i]["chunks"]) for i in ids)
    res["retrieved_donor_chunks"] = donor_chunks
    rng = random.Random(seed)
    for mode in ("reuse", "auto"):
        kl = {s: [rows[s][i]["modes"][mode]["kl_first_token_vs_baseline"] for i in ids] for s in rows}
        agree = {s: [float(rows[s][i]["modes"][mode]["output_ids"][:1] == rows[s][i]["modes"]["full"]["output_ids"][:1])
                     for i in ids] for s in rows}
        ansf1 = {s: [f1(rows[s][i]["modes"][mode]["answer"], rows[s][i]["modes"]["full"]["answer"]) for i in ids] for s in rows}
        frac = {s: [rows[s][i]["modes"][mode]["metrics"]["compute_fraction"] for i in ids] for s in rows}

        def recovery(sample, s):
            u = sum(kl["unrepaired"][k] for k in sample)
            return 1 - sum(kl[s][k] for k in sample) / u if u > 0 else 0.0

        everyone = list(range(len(ids)))
        diffs = sorted(recovery(smp, "donor") - recovery(smp, "off")
                       for smp in ([rng.randrange(len(ids)) for _ in ids] for _ in range(boot)))
        m = {s: {"kl_first_token": sum(kl[s]) / len(ids), "first_token_agreement": sum(agree[s]) / len(ids),
                 "answer_f1_vs_full": sum(ansf1[s]) / len(ids), "compute_fraction": sum(frac[s]) / len(ids),
                 "kl_recovery_vs_unrepaired": recovery(everyone, s)} for s in rows}
        m["recovery_donor_minus_off"] = {"point": recovery(everyone, "donor") - recovery(everyone, "off"),
                                         "ci95": [diffs[int(0.025 * boot)], diffs[int(0.975 * boot) - 1]]}
        res[mode] = m
    return res


def read_rkv(path, layers):
    """Layers `layers` of an f16 chunk cache (core/kv/chunk-kv-file.h), each (K, V) as flat float tuples."""
    import struct
    b = open(path, "rb").read()
    header_len = int.from_bytes(b[12:16], "little")
    h, at = b[16:16 + header_len], 0
    for _ in range(3):  # model fingerprint, chunk id, prefix
        at += 4 + int.from_bytes(h[at:at + 4], "little")
    n_layer, n_kv_head, head_dim, n_tokens = (int.from_bytes(h[at + 4 * i:at + 4 * i + 4], "little") for i in range(4))
    n = n_tokens * n_kv_head * head_dim
    start, block = 16 + header_len + 8, 2 * n * 2 + 8
    return [(struct.unpack_from(f"<{n}e", b, start + l * block), struct.unpack_from(f"<{n}e", b, start + l * block + 2 * n))
            for l in (x if x >= 0 else n_layer + x for x in layers)]


def kv_error(out, layers=(15, -1)):
    """Per donor-built chunk, its KV against the chunk computed whole (store-off): relative squared
    error sum ||X - fresh||^2 / sum ||fresh||^2 on a middle and the last layer, K and V apart,
    repaired and unrepaired (pure Python: two layers, not all)."""
    d = os.path.join(out, "content")
    acc = {s: {"k": [0.0, 0.0], "v": [0.0, 0.0]} for s in ("donor", "unrepaired")}
    chunks = 0
    for name in sorted(os.listdir(os.path.join(d, "store-donor", "kv"))):
        if not name.endswith(".donor.rkv"):
            continue
        fresh = read_rkv(os.path.join(d, "store-off", "kv", name.replace(".donor.rkv", ".rkv")), layers)
        chunks += 1
        for s in acc:
            for (k, v), (fk, fv) in zip(read_rkv(os.path.join(d, f"store-{s}", "kv", name), layers), fresh):
                for key, x, f in (("k", k, fk), ("v", v, fv)):
                    acc[s][key][0] += sum((a - c) * (a - c) for a, c in zip(x, f))
                    acc[s][key][1] += sum(c * c for c in f)
    res = {"chunks": chunks, "layers": list(layers)}
    for s in acc:
        res[s] = {f"relative_error_{key}": acc[s][key][0] / acc[s][key][1] for key in ("k", "v")}
    for key in ("k", "v"):
        res[f"recovery_{key}"] = 1 - res["donor"][f"relative_error_{key}"] / res["unrepaired"][f"relative_error_{key}"]
    return res


def retrieval(out, git_dir, tag, questions):
    pages_dir = os.path.join(out, "all-pages")
    if not os.path.isdir(pages_dir):
        names = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "--name-only", tag, "Documentation/"],
                               check=True, capture_output=True, text=True).stdout.split()
        export(git_dir, tag, [n for n in names if os.path.basename(n).startswith("git-") and n.endswith(".txt")], pages_dir)
    qs = [json.loads(l) for l in open(questions) if l.strip()]
    res = {"pages": len(os.listdir(pages_dir)), "questions": len(qs)}
    for chunking in ("content", "fixed"):
        idx = os.path.join(out, f"all-{chunking}")
        if not os.path.exists(os.path.join(idx, "manifest.json")):
            run("build-index", "--corpus", pages_dir, "--out", idx, "--chunking", chunking)
        gold = answer = 0
        for q in qs:
            r = subprocess.run([RAGKV, "search", "--index", idx, "--query", q["question"]], check=True,
                               capture_output=True, text=True)
            hits = [json.loads(l) for l in r.stdout.splitlines() if l.strip()][:5]
            gold += any(h["id"].split("#")[0] in q["gold_passages"] for h in hits)
            norm = lambda s: " ".join(s.lower().split())
            answer += any(norm(a) in norm(h["text"]) for h in hits for a in q["answers"])
        res[chunking] = {"gold_page_in_top5": gold / len(qs), "answer_in_top5": answer / len(qs)}
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("git_dir")
    ap.add_argument("out")
    ap.add_argument("questions")
    ap.add_argument("--old", default="v2.44.0")
    ap.add_argument("--new", default="v2.45.0")
    ap.add_argument("--skip-retrieval", action="store_true")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    pages = subprocess.run(["git", "--git-dir", a.git_dir, "diff", "--name-only", a.old, a.new, "--",
                            "Documentation/git-*.txt"], check=True, capture_output=True, text=True).stdout.split()
    old_dir, new_dir = os.path.join(out, a.old), os.path.join(out, a.new)
    for tag, dest in ((a.old, old_dir), (a.new, new_dir)):
        if not os.path.isdir(dest):
            export(a.git_dir, tag, pages, dest)
    res = {"old": a.old, "new": a.new, "pages": len(pages)}
    for chunking in ("content", "fixed"):
        done = os.path.join(out, f"update-{chunking}.json")  # a rerun keeps the measured update
        if not os.path.exists(done):
            with open(done, "w") as f:
                json.dump(update_cost(out, chunking, old_dir, new_dir), f)
        res[f"update_{chunking}"] = json.load(open(done))
    res["fidelity_content"] = fidelity(out, os.path.abspath(a.questions))
    res["kv_error_content"] = kv_error(out)
    if not a.skip_retrieval:
        res["retrieval"] = retrieval(out, a.git_dir, a.new, os.path.abspath(a.questions))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
