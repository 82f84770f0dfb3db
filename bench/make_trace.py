#!/usr/bin/env python3
"""A query trace for `ragkv bench cache` and `answer`: N SQuAD dev questions drawn at
random (seeded) from the shared set, in random order — a stream of users, not the file's
article-by-article order. Usage: make_trace.py QUERIES.jsonl N SEED > TRACE.jsonl"""
import random
import sys


def main() -> None:
    path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    if n > len(lines):
        sys.exit(f"{path} has {len(lines)} questions, fewer than {n}")
    for line in random.Random(seed).sample(lines, n):
        sys.stdout.write(line)


if __name__ == "__main__":
    main()
