#!/usr/bin/env python3
"""Side by side: llama.cpp's own `llama-bench` and `ragkv bench prefill` on the same GGUF, prompt
length and thread count, run back to back; prints one JSON object with both rates and the ratios
ours / llama.cpp. Decode is compared at two context depths, each engine at the same one: after an
empty context (llama-bench's tg test; ours after a one-token prompt) and after the prompt
(llama-bench's tg test at -d TOKENS; ours after the timed prefill). Comparing only the second of
ours with the first of llama.cpp's, as this script once did, favoured llama.cpp by the attention
over the prompt. llama-bench is built outside the repo from llama.cpp's source (for example the
copy vendored in the llama-cpp-python source package: cmake -B build -DGGML_NATIVE=ON, then
cmake --build build --target llama-bench); it is not part of `make setup`. Machines are shared:
alternate runs and quote ranges.

    python3 bench/llama_bench_compare.py --llama-bench PATH/llama-bench --ragkv build/ragkv \\
        --model models/X.gguf --threads 2 --tokens 512 --decode-tokens 32 --repetitions 3
"""
import argparse
import json
import subprocess
import sys


def run_json(cmd):
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def llama_bench(a):
    base = [a.llama_bench, "-m", a.model, "-r", str(a.repetitions), "-t", str(a.threads), "-o", "json"]
    rates = {}
    for test in run_json(base + ["-p", str(a.tokens), "-n", str(a.decode_tokens)]):
        if test["n_prompt"] > 0 and test["n_gen"] == 0:
            rates["prefill_tokens_per_s"] = test["avg_ts"]
        elif test["n_gen"] > 0 and test["n_prompt"] == 0:
            rates["decode_empty_tokens_per_s"] = test["avg_ts"]
    for test in run_json(base + ["-p", "0", "-n", str(a.decode_tokens), "-d", str(a.tokens)]):
        if test["n_gen"] > 0 and test["n_prompt"] == 0:
            rates["decode_after_prompt_tokens_per_s"] = test["avg_ts"]
    if len(rates) != 3:
        sys.exit(f"llama-bench printed no pp{a.tokens}, tg{a.decode_tokens} and "
                 f"tg{a.decode_tokens}@d{a.tokens} results")
    return rates


def ragkv_bench(a):
    def run(tokens):
        cmd = [a.ragkv, "bench", "prefill", "--models", a.model, "--tokens", str(tokens), "--decode-tokens",
               str(a.decode_tokens), "--repetitions", str(a.repetitions), "--decode-batch", "1", "--device", "cpu",
               "--threads", str(a.threads)]
        return run_json(cmd)["results"][0]

    # llama-bench reports mean rates; ours the medians of the timed prefills and decodes.
    r = run(a.tokens)
    empty = run(1)
    return {"prefill_tokens_per_s": r["prefill_tokens_per_s_median"],
            "decode_empty_tokens_per_s": empty["decode_tokens_per_s"],
            "decode_after_prompt_tokens_per_s": r["decode_tokens_per_s"], "peak_rss_mib": r.get("peak_rss_mib")}


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
        "decode_ratio_empty": ours["decode_empty_tokens_per_s"] / lc["decode_empty_tokens_per_s"],
        "decode_ratio_after_prompt": ours["decode_after_prompt_tokens_per_s"] / lc["decode_after_prompt_tokens_per_s"],
    }, indent=1))


if __name__ == "__main__":
    main()
