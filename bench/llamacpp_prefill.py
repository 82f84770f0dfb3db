#!/usr/bin/env python3
"""Side-by-side reference for `ragkv bench prefill`: prefill and decode tokens/s of llama.cpp on
the same GGUF, prompt length and thread count, through an already installed llama-cpp-python.
Prints JSON. Not run by CI; see the README's benchmark section.

    python3 bench/llamacpp_prefill.py --model models/X.gguf --threads 2 --tokens 512
"""
import argparse
import json
import time

import llama_cpp

TEXT = ("The Normans were the people who in the 10th and 11th centuries gave their name to "
        "Normandy, a region in France. ")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--repetitions", type=int, default=3)
    a = ap.parse_args()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=a.tokens + a.decode_tokens + 8, n_batch=a.tokens,
                          n_ubatch=a.tokens, n_threads=a.threads, n_threads_batch=a.threads,
                          verbose=False)
    ids = []
    while len(ids) < a.tokens:
        ids += llm.tokenize(TEXT.encode(), add_bos=False)
    ids = ids[:a.tokens]
    times = []
    for rep in range(a.repetitions + 1):  # rep 0 warms up
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        if rep:
            times.append(time.perf_counter() - t0)
    times.sort()
    t0 = time.perf_counter()
    for _ in range(a.decode_tokens):
        llm.eval([ids[0]])  # the token fed does not change the cost
    decode_s = time.perf_counter() - t0
    print(json.dumps({"engine": f"llama.cpp (llama-cpp-python {llama_cpp.__version__})", "model": a.model,
                      "threads": a.threads, "prompt_tokens": a.tokens,
                      "prefill_ms_best": times[0] * 1e3,
                      "prefill_tokens_per_s": a.tokens / times[0],
                      "prefill_tokens_per_s_median": a.tokens / times[len(times) // 2],
                      "decode_tokens_per_s": a.decode_tokens / decode_s}, indent=2))


if __name__ == "__main__":
    main()
