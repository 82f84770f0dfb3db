# issue 14 item 5: T1/T2 on the SQuAD index (1,903 chunks), 100 SQuAD questions, blend, top-5, --batch 8.
# $1: part (a: in input order, b: reordered)
set -ex
cd /work/wt-kvq
R=/work/data/bin/ragkv-specsearch
D=/work/data
O=$D/runs/specsearch
common="$D/squad200.jsonl --index $D/squad-index --store $D/squad-store-smollm2 --mode blend --top-k 5 --threads 2 --batch 8 --limit 100"
if [ "$1" = a ]; then
  for cfg in "no-pipeline:" "pipeline:--pipeline --search-slice 0" "speculative:--pipeline --search-slice 32"; do
    name=${cfg%%:*}; flags=${cfg#*:}
    $R answer $common --no-reorder $flags --out $O/squad-inorder-$name.jsonl --summary $O/squad-inorder-$name.json 2> $O/squad-inorder-$name.log
  done
else
  for cfg in "no-pipeline:" "speculative:--pipeline --search-slice 32"; do
    name=${cfg%%:*}; flags=${cfg#*:}
    $R answer $common $flags --out $O/squad-reorder-$name.jsonl --summary $O/squad-reorder-$name.json 2> $O/squad-reorder-$name.log
  done
fi
