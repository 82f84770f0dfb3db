# issue 14 item 5: T1/T2 on a larger index: SQuAD dev passages + MuSiQue corpus at 64-token chunks
# (18,464 chunks, 9.7x the SQuAD index); no store for it, so mode full and no speculative loads.
set -ex
cd /work/wt-kvq
R=/work/data/bin/ragkv-specsearch
D=/work/data
O=$D/runs/specsearch
common="$D/squad200.jsonl --index $D/specsearch-big/index-c64 --mode full --top-k 5 --threads 2 --batch 8 --limit 60 --max-tokens 8 --no-reorder"
for cfg in "no-pipeline:" "pipeline:--pipeline --search-slice 32"; do
  name=${cfg%%:*}; flags=${cfg#*:}
  $R answer $common $flags --out $O/big-$name.jsonl --summary $O/big-$name.json 2> $O/big-$name.log
done
