#!/usr/bin/env python3
"""Joins two eval summaries (JSON) of the same questions for one picture: BASE's modes, then ADD's
modes other than full and reuse under PREFIX + name. Each mode keeps its own run's ratios to full.

  python3 merge_summaries.py BASE.json ADD.json PREFIX > MERGED.json"""
import json, sys
base, add, prefix = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
if base['queries'] != add['queries']:
    sys.exit(f"different question counts: {base['queries']} and {add['queries']}")
for m in add['mode_order']:
    if m.split(' ')[0] in ('full', 'reuse'):
        continue
    base['modes'][prefix + m] = add['modes'][m]
    base['mode_order'].append(prefix + m)
json.dump(base, sys.stdout)
