#!/usr/bin/env python3
"""SQuAD questions of one passage as the turns of a conversation (the multi-turn run of
bench/results/README.md, "Multi-turn conversations and dedup").
The passages are those of the SQuAD 200 sample (every len/200-th line of squad-dev.queries.jsonl,
bench/results/README.md), in the sample's order; the first N of them with at least T questions
give conversations "conv-<passage>" whose turns 1..T are the passage's first T questions in the
file. Written interleaved by turn (every turn 1, then every turn 2, ...) so that `answer --batch`
has other conversations to decode while a turn waits for its predecessor's answer.

    python3 bench/make_conversations.py ../shared/data/squad-dev.queries.jsonl --passages 20 --turns 3 > conv.jsonl
"""
import argparse
import collections
import json

ap = argparse.ArgumentParser()
ap.add_argument("queries")
ap.add_argument("--passages", type=int, default=20)
ap.add_argument("--turns", type=int, default=3)
a = ap.parse_args()

lines = open(a.queries).readlines()
rows = [json.loads(l) for l in lines]
by_passage = collections.defaultdict(list)
for q in rows:
    by_passage[q["gold_passages"][0]].append(q)
sample = [json.loads(l) for l in lines[:: len(lines) // 200][:200]]
order = list(dict.fromkeys(q["gold_passages"][0] for q in sample))
chosen = [(p, by_passage[p][: a.turns]) for p in order if len(by_passage[p]) >= a.turns][: a.passages]
for t in range(a.turns):
    for p, qs in chosen:
        q = qs[t]
        print(json.dumps({"id": q["id"], "conversation": "conv-" + p, "turn": t + 1, "question": q["question"],
                          "answers": q["answers"], "gold_passages": q["gold_passages"]}))
