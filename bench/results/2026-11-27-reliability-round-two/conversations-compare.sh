#!/bin/bash
# auto and blend against full on the same prompts (--compare full answers each turn over the mode's
# own history), for two binaries. Usage: conversations-compare.sh BIN_BEFORE BIN_AFTER, in the folder
# of conversations-run.sh.
for B in "$1:before" "$2:after"; do
  bin=${B%%:*}; tag=${B##*:}
  for m in auto blend; do
    $bin answer conv.jsonl --index index --store store --mode $m --compare full --threads 2 --out cmp-$tag-$m.jsonl --summary cmp-$tag-$m.json 2>/dev/null
  done
done
