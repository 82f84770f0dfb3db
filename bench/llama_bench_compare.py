#!/usr/bin/env python3
"""Side by side: llama.cpp's own `llama-bench` and `ragkv bench prefill` on the same GGUF, prompt
length and thread count, run back to back; prints one JSON object with both rates and the ratios
ours / llama.cpp. llama-bench is built outside the repo from llama.cpp's source (for example the
copy vendored in the llama-cpp-python source package: cmake -B build -DGGML_NATIVE=ON, then
cmake --build build --target llama-bench); it is not part of `make setup`. Run through
/work/tools/quiet.sh when the seconds are to be quoted.

    python3 bench/llama_bench_compare.py --llama-bench PATH/llama-bench --ragkv build/ragkv \\
        --model models/X.gguf --threads 2 --tokens 512 --decode-tokens 32 --repetitions 3
"""
import argparse
import json
import subprocess
import sys


def llama_bench(a):
    cmd = [a.llama_bench, "-m", a.model, "-p", str(a.tokens), "-n", str(a.decode_tokens), "-r", str(a.repetitions),
           "-t", str(a.threads), "-o", "json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rates = {}
    for test in json.loads(out):
        if test["n_prompt"] > 0 and test["n_gen"] == 0:
            rates["prefill_tokens_per_s"] = test["avg_ts"]
        elif test["n_gen"] > 0 and test["n_prompt"] == 0:
            rates["decode_tokens_per_s"] = test["avg_ts"]
    if len(rates) != 2:
        sys.exit(f"llama-bench printed no pp{a.tokens}/tg{a.decode_tokens} results: {out[:400]}")
    return rates


def ragkv_bench(a):
    cmd = [a.ragkv, "bench", "prefill", "--model", a.model, "--tokens", str(a.tokens), "--decode-tokens",
           str(a.decode_tokens), "--repetitions", str(a.repetitions), "--decode-batch", "1", "--device", "cpu",
           "--threads", str(a.threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)["results"][0]
    # llama-bench reports mean rates; ours the median of the timed prefills (decode: one run).
    return {"prefill_tokens_per_s": r["prefill_tokens_per_s_median"], "decode_tokens_per_s": r["decode_tokens_per_s"],
            "peak_rss_mib": r.get("peak_rss_mib")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--ragkv", default="build/ragkv")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--repetitions", type=int, default=3)
    a = ap.parse_args()
    lc = llama_bench(a)
    ours = ragkv_bench(a)
    print(json.dumps({
        "model": a.model, "threads": a.threads, "prompt_tokens": a.tokens, "decode_tokens": a.decode_tokens,
        "llamacpp": lc, "ragkv": ours,
        "prefill_ratio": ours["prefill_tokens_per_s"] / lc["prefill_tokens_per_s"],
        "decode_ratio": ours["decode_tokens_per_s"] / lc["decode_tokens_per_s"],
    }, indent=1))


if __name__ == "__main__":
    main()
