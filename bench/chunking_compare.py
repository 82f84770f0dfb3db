#!/usr/bin/env python3
"""Fixed vs content-defined chunking (`build-index --chunking`) on long documents.

The SQuAD dev passages of ../shared/data joined by article title (passages as paragraphs, in
file order) make ~48 long documents. For each chunking:
  * survival under an edit: every article gets one sentence inserted at a seeded random sentence
    end; the share of the edited index's chunks (and of their tokens, i.e. KV token-layers) whose
    id and text — so cache key — are unchanged, which precompute would not compute again;
  * retrieval on the unedited index, QUERIES questions (seeded sample): a top-5 hit is gold when
    its byte span overlaps the question's gold passage within the joined article; also whether a
    gold answer string is inside a top-5 chunk.
Prints one JSON object; the work files stay in OUT.

  bench/chunking_compare.py OUT [--queries 300] [--seed 1] [--ragkv build/ragkv]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data")
INSERT = "This sentence was added in a later revision of the article, and nothing else changed."


def joined_articles():
    docs, spans = {}, {}  # title id -> text; passage id -> (title id, start, end)
    for line in open(os.path.join(DATA, "squad-dev.corpus.jsonl")):
        p = json.loads(line)
        tid = p["title"].replace(" ", "_")
        text = docs.get(tid, "")
        if text:
            text += "\n\n"
        spans[p["id"]] = (tid, len(text.encode()), len(text.encode()) + len(p["text"].encode()))
        docs[tid] = text + p["text"]
    return docs, spans


def edited(docs, seed):
    rng = random.Random(seed)
    out = {}
    for tid, text in docs.items():
        ends = [m.end() for m in re.finditer(r"[.!?] ", text)]
        at = rng.choice(ends) if ends else len(text)
        out[tid] = text[:at] + INSERT + " " + text[at:]
    return out


def write_corpus(path, docs):
    with open(path, "w") as f:
        for tid, text in docs.items():
            f.write(json.dumps({"id": tid, "title": tid.replace("_", " "), "text": text}) + "\n")


def build(ragkv, corpus, out, chunking):
    if not os.path.exists(os.path.join(out, "manifest.json")):
        subprocess.run([ragkv, "build-index", "--corpus", corpus, "--out", out, "--chunking", chunking],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return [json.loads(l) for l in open(os.path.join(out, "chunks.jsonl"))]


def survival(before, after):
    old = {c["id"]: c["text"] for c in before}
    kept = [c for c in after if old.get(c["id"]) == c["text"]]
    tokens = sum(c["n_tokens"] for c in after)
    return {"chunks": len(after), "unchanged_chunks": len(kept), "unchanged_share": len(kept) / len(after),
            "unchanged_token_share": sum(c["n_tokens"] for c in kept) / tokens}


def retrieval(ragkv, index, chunks, queries, spans):
    by_id = {c["id"]: c for c in chunks}
    gold_hits = answer_hits = 0
    for q in queries:
        r = subprocess.run([ragkv, "search", "--index", index, "--query", q["question"]], check=True,
                           capture_output=True, text=True)
        hits = [json.loads(l) for l in r.stdout.splitlines() if l.strip()][:5]
        tid, a, b = spans[q["gold_passages"][0]]
        gold = False
        for h in hits:
            c = by_id[h["id"]]
            start = c["offset"]
            end = start + len(c["text"].encode())
            gold |= c["doc"] == tid and start < b and a < end
        gold_hits += gold
        answer_hits += any(ans in h["text"] for h in hits for ans in q["answers"])
    n = len(queries)
    return {"queries": n, "gold_passage_in_top5": gold_hits / n, "answer_in_top5": answer_hits / n}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ragkv", default=os.path.join(ROOT, "build", "ragkv"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    docs, spans = joined_articles()
    write_corpus(os.path.join(a.out, "v1.jsonl"), docs)
    write_corpus(os.path.join(a.out, "v2.jsonl"), edited(docs, a.seed))
    qs = [json.loads(l) for l in open(os.path.join(DATA, "squad-dev.queries.jsonl"))]
    qs = [q for q in qs if q.get("gold_passages") and q["gold_passages"][0] in spans]
    queries = random.Random(a.seed).sample(qs, min(a.queries, len(qs)))
    result = {"articles": len(docs), "passages": len(spans), "seed": a.seed, "edit": "one sentence inserted per article"}
    for chunking in ("fixed", "content"):
        v1 = build(a.ragkv, os.path.join(a.out, "v1.jsonl"), os.path.join(a.out, f"{chunking}-v1"), chunking)
        v2 = build(a.ragkv, os.path.join(a.out, "v2.jsonl"), os.path.join(a.out, f"{chunking}-v2"), chunking)
        result[chunking] = {"survival": survival(v1, v2),
                            "retrieval": retrieval(a.ragkv, os.path.join(a.out, f"{chunking}-v1"), v1, queries, spans),
                            "mean_chunk_tokens": sum(c["n_tokens"] for c in v1) / len(v1)}
        print(f"chunking_compare: {chunking}: {json.dumps(result[chunking])}", file=sys.stderr)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
