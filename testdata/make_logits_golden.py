#!/usr/bin/env python3
"""Golden logits and greedy tokens from two independent implementations on the same GGUF files
ragkv loads:

* Hugging Face transformers (GGUF loaded and dequantised to float32 by transformers itself; an
  fp32 forward pass): the tight reference — it computes what ragkv computes (f32 activations over
  the dequantised weights), so logits agree to rounding and greedy tokens match.
* llama.cpp (through llama-cpp-python): a looser cross-check — its CPU matmuls round activations
  to 8 bits (Q8_1/Q8_K) for quantised weights, so its logits differ from any f32 engine by
  tenths of a logit and its greedy text can fork at near-ties.

For each default model, three prompts of >= 200 tokens (two SQuAD passages and a question from
../shared/data; SmolLM2 in its chat template, Gemma 3 270M — a base model without a chat
template — as plain text) are tokenized by llama.cpp; the fixture records the ids, for each
reference the last-position logits at the 256 largest and 1,024 fixed random vocabulary ids
(enough to bound the error without committing whole vocabulary rows), and 32 greedy tokens.

Not run by CI. To regenerate (after `make setup`), in a scratch virtual environment:
    pip install torch transformers accelerate gguf llama-cpp-python numpy
    python testdata/make_logits_golden.py
"""
import json
import sys
from pathlib import Path

import llama_cpp
import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

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
N_SAMPLE = 1024


def load_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def prompts():
    corpus = {p["id"]: p for p in load_jsonl(DATA / "squad-dev.corpus.jsonl")}
    queries = load_jsonl(DATA / "squad-dev.queries.jsonl")
    out = []
    for pid in PASSAGES:
        q = next(q for q in queries if q.get("gold_passages") == [pid])
        p, nxt = corpus[pid], corpus[pid.replace("#0", "#1")]
        out.append(f"{p['title']}\n{p['text']}\n\n{nxt['text']}\n\n"
                   f"Answer the question from the passages above.\nQuestion: {q['question']}")
    return out


def pick(logits, sample_ids):
    top = np.argsort(-logits)[:N_TOP]
    return ([[int(i), float(logits[i])] for i in top],
            [[int(i), float(logits[i])] for i in sample_ids])


def hf_run(model, ids):
    """Last-position logits of the prompt and N_GREEDY greedy tokens (no stop at EOS)."""
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=True)
        logits = out.logits[0, -1].float().numpy()
        pkv, cur, greedy = out.past_key_values, logits, []
        for _ in range(N_GREEDY):
            t = int(np.argmax(cur))
            greedy.append(t)
            out = model(torch.tensor([[t]]), past_key_values=pkv, use_cache=True)
            pkv, cur = out.past_key_values, out.logits[0, -1].float().numpy()
    return logits, greedy


def llamacpp_run(llm, ids):
    llm.reset()
    llm.eval(ids)
    logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    cur, greedy = logits, []
    for _ in range(N_GREEDY):
        t = int(np.argmax(cur))
        greedy.append(t)
        llm.eval([t])
        cur = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    return logits, greedy


def main():
    rng = np.random.default_rng(1234)
    torch.manual_seed(0)
    for key, (fname, template, add_bos) in MODELS.items():
        path = ROOT / "models" / fname
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_batch=512, n_threads=2,
                              logits_all=True, flash_attn=False, verbose=False)
        hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=fname, dtype=torch.float32)
        hf.eval()
        n_vocab = llm.n_vocab()
        sample_ids = np.sort(rng.choice(n_vocab, N_SAMPLE, replace=False))
        cases = []
        for text in prompts():
            prompt = template.format(text)
            ids = llm.tokenize(prompt.encode(), add_bos=add_bos, special=True)
            assert len(ids) >= 200, (key, len(ids))
            hf_logits, hf_greedy = hf_run(hf, ids)
            lc_logits, lc_greedy = llamacpp_run(llm, ids)
            hf_top, hf_sample = pick(hf_logits, sample_ids)
            lc_top, lc_sample = pick(lc_logits, sample_ids)
            cases.append({
                "prompt": prompt,
                "ids": [int(i) for i in ids],
                "hf": {"top": hf_top, "sample": hf_sample, "greedy": hf_greedy,
                       "greedy_text": llm.detokenize(hf_greedy).decode("utf-8", "replace")},
                "llamacpp": {"top": lc_top, "sample": lc_sample, "greedy": lc_greedy,
                             "greedy_text": llm.detokenize(lc_greedy).decode("utf-8", "replace")},
            })
            print(key, len(ids), "tokens; hf vs llama.cpp max |d|",
                  float(np.max(np.abs(hf_logits - lc_logits))), repr(cases[-1]["hf"]["greedy_text"][:60]),
                  file=sys.stderr)
        out = {"model": fname,
               "references": {"hf": f"transformers {transformers.__version__}, torch {torch.__version__}, float32",
                              "llamacpp": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}"},
               "n_vocab": n_vocab, "cases": cases}
        (ROOT / "testdata" / f"logits_golden_{key}.json").write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
