#!/usr/bin/env python3
"""Writes testdata/rag-mini.{corpus,queries}.jsonl: a tiny slice of ../shared/data/squad-dev
(SQuAD v1.1 dev, CC BY-SA 4.0) for the chunk-KV end-to-end tests — the first passage of 50-90
words from each of six articles, and two of its questions each. The first two queries pin their
passages (as the MuSiQue set does); the rest are answered by retrieval."""
import collections
import json
import pathlib

here = pathlib.Path(__file__).resolve().parent
data = here.parent.parent / "shared" / "data"
corpus = [json.loads(l) for l in open(data / "squad-dev.corpus.jsonl")]
queries = [json.loads(l) for l in open(data / "squad-dev.queries.jsonl")]
by_passage = collections.defaultdict(list)
for q in queries:
    by_passage[q["gold_passages"][0]].append(q)

picked, articles = [], set()
for c in corpus:
    article = c["id"].split("#")[0]
    if article in articles or not 50 <= len(c["text"].split()) <= 90:
        continue
    articles.add(article)
    picked.append(c)
    if len(picked) == 6:
        break

out_q = []
for c in picked:
    out_q += by_passage[c["id"]][:2]
ids = [c["id"] for c in picked]
out_q[0] = dict(out_q[0], passages=[ids[1], ids[0], ids[2]])
out_q[1] = dict(out_q[1], passages=[ids[0], ids[3], ids[4], ids[5]])

with open(here / "rag-mini.corpus.jsonl", "w") as f:
    for c in picked:
        f.write(json.dumps(c, ensure_ascii=False) + "\n")
with open(here / "rag-mini.queries.jsonl", "w") as f:
    for q in out_q:
        f.write(json.dumps(q, ensure_ascii=False) + "\n")
print(len(picked), "passages,", len(out_q), "queries")
