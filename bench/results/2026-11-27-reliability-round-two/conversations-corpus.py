#!/usr/bin/env python3
"""The corpus of the 12-turn conversation run: the gold passages of conv.jsonl, the other passages
of their articles, then the first passages of squad-dev.corpus.jsonl, 200 in all.
    python3 bench/make_conversations.py ../shared/data/squad-dev.queries.jsonl --passages 4 --turns 12 > conv.jsonl
    python3 conversations-corpus.py ../shared/data/squad-dev.corpus.jsonl conv.jsonl > corpus.jsonl
"""
import json
import sys

lines = open(sys.argv[1]).readlines()
gold = {json.loads(l)["gold_passages"][0] for l in open(sys.argv[2])}
out = [l for l in lines if json.loads(l)["id"] in gold]
titles = {json.loads(l)["title"] for l in out}
for l in lines:
    if len(out) >= 160:
        break
    j = json.loads(l)
    if j["id"] not in gold and j["title"] in titles:
        out.append(l)
for l in lines:
    if len(out) >= 200:
        break
    if l not in out:
        out.append(l)
sys.stdout.writelines(out)
