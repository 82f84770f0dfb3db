#!/usr/bin/env python3
"""Golden logits and greedy tokens from an independent implementation: llama.cpp, through the
llama-cpp-python package, on the same GGUF files ragkv loads.

For each default model, three prompts of >= 200 tokens (a SQuAD passage and a question from
../shared/data, in SmolLM2's chat template; Gemma 3 270M is a base model, so plain text) are tokenized by llama.cpp; the fixture
records the token ids, the last-position logits (the 256 largest plus 2,048 entries at fixed
random vocabulary ids, enough to bound the error without committing whole vocab rows) and the
32 greedy tokens that follow.

Not run by CI. To regenerate (after `make setup`):
    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install llama-cpp-python numpy
    /tmp/refenv/bin/python testdata/make_logits_golden.py
"""
import json
import sys
from pathlib import Path

import numpy as np
import llama_cpp

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
MODELS = {
    "smollm2": ("SmolLM2-135M-Instruct.Q4_1.gguf",
                "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n", False),
    # google/gemma-3-270m is the pretrained (not instruction-tuned) model and its GGUF has no
    # chat template: a plain completion prompt.
    "gemma3": ("gemma-3-270m-q4_k_m.gguf", "{}\nAnswer:", True),
}
PASSAGES = ["Super_Bowl_50#0", "Normans#0", "Amazon_rainforest#0"]
N_GREEDY = 32
N_TOP = 256
N_SAMPLE = 2048


def load_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def prompts():
    corpus = {p["id"]: p for p in load_jsonl(DATA / "squad-dev.corpus.jsonl")}
    queries = load_jsonl(DATA / "squad-dev.queries.jsonl")
    out = []
    for pid in PASSAGES:
        if pid not in corpus:
            sys.exit(f"passage {pid} not in the corpus")
        q = next(q for q in queries if q.get("gold_passages") == [pid])
        p, nxt = corpus[pid], corpus[pid.replace("#0", "#1")]
        out.append(f"{p['title']}\n{p['text']}\n\n{nxt['text']}\n\n"
                   f"Answer the question from the passages above.\nQuestion: {q['question']}")
    return out


def main():
    rng = np.random.default_rng(1234)
    for key, (fname, template, add_bos) in MODELS.items():
        path = ROOT / "models" / fname
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_batch=512, n_threads=2,
                              logits_all=True, verbose=False)
        n_vocab = llm.n_vocab()
        sample_ids = np.sort(rng.choice(n_vocab, N_SAMPLE, replace=False))
        cases = []
        for text in prompts():
            prompt = template.format(text)
            ids = llm.tokenize(prompt.encode(), add_bos=add_bos, special=True)
            assert len(ids) >= 200, (key, len(ids))
            llm.reset()
            llm.eval(ids)
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top = np.argsort(-logits)[:N_TOP]
            greedy = []
            cur = logits
            for _ in range(N_GREEDY):
                t = int(np.argmax(cur))
                greedy.append(t)
                llm.eval([t])
                cur = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            cases.append({
                "prompt": prompt,
                "ids": [int(i) for i in ids],
                "top": [[int(i), float(logits[i])] for i in top],
                "sample": [[int(i), float(logits[i])] for i in sample_ids],
                "greedy": greedy,
                "greedy_text": llm.detokenize(greedy).decode("utf-8", "replace"),
            })
            print(key, len(ids), "tokens ->", repr(cases[-1]["greedy_text"][:80]), file=sys.stderr)
        out = {"model": fname, "reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}",
               "n_vocab": n_vocab, "cases": cases}
        (ROOT / "testdata" / f"logits_golden_{key}.json").write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
