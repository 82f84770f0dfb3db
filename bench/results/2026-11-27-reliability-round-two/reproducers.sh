#!/bin/bash
# The reproducers of the hostile-store faults (bench/results/README.md § Reliability against a hostile
# store), run against BIN (default: build/ragkv of this checkout). Prints one line per case: the
# exit status (124: killed by `timeout 10`, a hang) and the last line of stderr.
#   bash bench/results/2026-11-27-reliability-round-two/reproducers.sh
#   BIN=/path/to/old/ragkv bash bench/results/2026-11-27-reliability-round-two/reproducers.sh
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
R=${BIN:-$SRC/build/ragkv}
W=${WORK:-/tmp/ragkv-reproducers}
mkdir -p $W && cd $W
if [ ! -d S ]; then  # a tiny random model, the rag-mini index and a store with neighbour variants
  $R make-test-model --arch llama --layers 2 --embd 64 --heads 2 --kv-heads 1 --ff 128 --context 4096 --out tiny.gguf >/dev/null 2>&1
  $R build-index --corpus $SRC/testdata/rag-mini.corpus.jsonl --chunk-tokens 256 --out index --model tiny.gguf >/dev/null 2>&1
  $R precompute --index index --store S --neighbours 1 --model tiny.gguf --threads 1 >/dev/null 2>&1
fi
M="--model tiny.gguf --threads 1"
Q=$SRC/testdata/rag-mini.queries.jsonl
fresh() { rm -rf c/$1; mkdir -p c; cp -r S c/$1; echo c/$1; }
show() { local name=$1 rc=$2 err=$3; printf '%-34s rc=%-4s %s\n' "$name" "$rc" "$(echo "$err" | grep -v '^\s*$' | tail -1 | cut -c1-150)"; }
run() { local name=$1; shift; local e; e=$(timeout 10 "$@" 2>&1 >/dev/null); show "$name" $? "$e"; }
K=$(ls S/kv | grep -v '\..*\.rkv' | head -1)
# 1 FIFO
d=$(fresh fifo-kv); rm $d/kv/$K; mkfifo $d/kv/$K
run "1 fifo kv: store verify" $R store verify --store $d
run "1 fifo kv: store stats" $R store stats --store $d
run "1 fifo kv: store repair" $R store repair --store $d
run "1 fifo kv: answer" $R answer $Q --index index --store $d --limit 2 --max-tokens 2 $M --out $d/a.jsonl
d=$(fresh fifo-json); rm $d/store.json; mkfifo $d/store.json
run "1 fifo store.json: answer" $R answer $Q --index index --store $d --limit 2 --max-tokens 2 $M --out $d/a.jsonl
d=$(fresh fifo-log); rm $d/verified.log; mkfifo $d/verified.log
run "1 fifo verified.log: precompute" $R precompute --index index --store $d $M
# 2 claim with huge lease, foreign host
d=$(fresh claim); rm $d/kv/$K; echo '{"format":"ragkv-claim","host":"elsewhere","boot_id":"x","pid":1,"start_ticks":1,"started_unix_ms":0,"lease_s":1e308,"token":"t"}' > $d/kv/$K.claim
run "2 claim lease 1e308: precompute" $R precompute --index index --store $d $M --neighbours 0
# 2b zombie owner
d=$(fresh zombie); rm $d/kv/$K
( sleep 0.2 & exec sleep 30 ) & ZP=$!; sleep 0.5; Z=$(ps -o pid= --ppid $ZP | tr -d ' ')
ST=$(awk '{print $22}' /proc/$Z/stat 2>/dev/null || echo 0); BOOT=$(cat /proc/sys/kernel/random/boot_id)
echo "{\"format\":\"ragkv-claim\",\"host\":\"$(hostname)\",\"boot_id\":\"$BOOT\",\"pid\":$Z,\"start_ticks\":$ST,\"started_unix_ms\":0,\"lease_s\":3000,\"token\":\"t\"}" > $d/kv/$K.claim
run "2 zombie claimant ($(awk '{print $3}' /proc/$Z/stat)): precompute" $R precompute --index index --store $d $M --neighbours 0
kill $ZP 2>/dev/null
# 3 symlinks
d=$(fresh symlink); echo victim > c/victim; rm $d/verified.log; ln -s ../victim $d/verified.log; rm $d/kv/$K
run "3 verified.log -> victim: precompute" $R precompute --index index --store $d $M --neighbours 0
echo "   victim now $(wc -c < c/victim) bytes (was 7)"
d=$(fresh dangling); rm -f $d/variants.lock c/outside; ln -s ../outside $d/variants.lock; rm $d/kv/$K
run "3 dangling variants.lock: precompute" $R precompute --index index --store $d $M
echo "   c/outside exists: $(test -e c/outside && echo yes || echo no)"
# 5 eval --limit 1 --report
d=$(fresh eval1)
run "5 eval --limit 1 --report R.md" $R eval $Q --index index --store $d --limit 1 --max-tokens 2 $M --modes blend --report $d/R.md
echo "   report written: $(test -s $d/R.md && echo yes || echo no)"
# 6 answer error path: partial left behind
d=$(fresh partial); printf '{"question": "x"}\nnot json\n' > $d/q.jsonl
run "6 answer bad query file" $R answer $d/q.jsonl --index index --store $d --max-tokens 2 $M --out $d/a.jsonl
echo "   partial left: $(ls $d/a.jsonl* 2>/dev/null | tr '\n' ' ')"
# 7 embedder copy in another folder
rm -rf c/emb-copy; cp -r $SRC/models/all-MiniLM-L6-v2 c/emb-copy
# 8 directory at a cache name; kv as a file
d=$(fresh dirkey); rm $d/kv/$K; mkdir $d/kv/$K
run "8 dir at cache name: store repair" $R store repair --store $d --index index $M
d=$(fresh kvfile); rm -rf $d/kv; echo x > $d/kv
run "8 kv/ a file: answer" $R answer $Q --index index --store $d --limit 2 --max-tokens 2 $M --out $d/a.jsonl
# 4 write-back into a store that refuses the variant (a directory planted at each variant's name)
d=$(fresh wb-probe); rm -f $d/kv/*.*.rkv; i=0; for f in $(ls $d/kv/*.rkv | sort); do i=$((i+1)); [ $((i%2)) = 0 ] && rm $f; done
ls $d/kv > c/wb-before.txt
$R answer $Q --index index --store $d --mode blend --limit 4 --top-k 2 --max-tokens 3 $M --write-back --out c/wb-probe.jsonl 2>/dev/null
e=$(fresh wb); rm -f $e/kv/*.*.rkv; for f in $(ls $e/kv); do grep -qx $f c/wb-before.txt || rm $e/kv/$f; done
for f in $(ls $d/kv); do grep -qx $f c/wb-before.txt || mkdir $e/kv/$f; done
run "4 write-back refused: answer" $R answer $Q --index index --store $e --mode blend --limit 4 --top-k 2 --max-tokens 3 $M --write-back --out $e/a.jsonl
echo "   answers written: $(cat $e/a.jsonl 2>/dev/null | wc -l) of 4"
# 6 an error after the output was opened; stdout that cannot be written
printf '{"id":"a","question":"who?","passages":["Nope#0"]}\n' > c/badp.jsonl
rm -f c/stopped.jsonl*
run "6 answer stops mid-run" $R answer c/badp.jsonl --index index --store S $M --max-tokens 2 --out c/stopped.jsonl
echo "   partial left: $(ls c/stopped.jsonl* 2>/dev/null | tr '\n' ' ')"
e=$(timeout 10 $R answer $Q --index index --store S --limit 1 --max-tokens 2 $M 2>&1 >/dev/full); show "6 answer > /dev/full" $? "$e"
# 7 the embedder in another folder, queries that are searched
printf '{"id":"s","question":"Who won Super Bowl 50?"}\n' > c/search.jsonl
rm -rf c/idx7; $R build-index --corpus $SRC/testdata/rag-mini.corpus.jsonl --chunk-tokens 256 --out c/idx7 --model tiny.gguf >/dev/null 2>&1
run "7 embedder copy elsewhere" $R answer c/search.jsonl --index c/idx7 --store S --max-tokens 2 $M --embedder c/emb-copy --out c/emb.jsonl
# 10 GGUF tensor offsets: one off the alignment, one overlapping another
python3 - <<'PY'
import struct
b=bytearray(open('tiny.gguf','rb').read())
def off_at(name, ndims=2):
    i=b.find(name.encode()); return i+len(name)+4+8*ndims+4
a=off_at('blk.0.attn_k.weight'); q=off_at('blk.0.attn_q.weight')
m=bytearray(b); struct.pack_into('<Q', m, a, struct.unpack_from('<Q', b, a)[0]+4); open('c/misaligned.gguf','wb').write(m)
o=bytearray(b); struct.pack_into('<Q', o, a, struct.unpack_from('<Q', b, q)[0]); open('c/overlap.gguf','wb').write(o)
PY
run "10 gguf misaligned offset" $R generate --model c/misaligned.gguf --prompt hi --max-tokens 2
run "10 gguf overlapping tensors" $R generate --model c/overlap.gguf --prompt hi --max-tokens 2
