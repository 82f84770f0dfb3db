#!/usr/bin/env python3
"""Golden token ids for tests/test-tokenizer.cpp, from the reference tokenizer (Hugging Face).

Writes testdata/tokenizer_golden_smollm2.json and testdata/tokenizer_golden_gemma3.json:
    {"model": <gguf file name>, "reference": <what produced the ids>,
     "cases": [{"text": ..., "ids": [...], "parse_special": bool, "roundtrip": bool}]}
ids never include BOS. parse_special (default true) matches special-token texts ("<|im_start|>")
as their ids (HF's default); false is HF's encode_special_tokens=True. roundtrip is true where HF
decodes the ids back to the text and they hold no special token (special tokens decode to "" in
ragkv); the C++ test checks decode(encode(text)) == text for those. It is false where the vocabulary
cannot spell the text (SmolLM2 has no token for the bytes 0x04, 0x13, ...: HF drops them).

Reference: Hugging Face `tokenizers`, built from the same GGUF by transformers' GGUF conversion
(transformers.integrations.gguf: get_gguf_tokenizer + convert_gguf_tokenizer, the code
AutoTokenizer.from_pretrained(dir, gguf_file=name) runs for the tokenizer). We call those two
functions directly because AutoTokenizer also builds the model config, which needs torch; where
torch is not installed a stand-in module satisfies the reader's `import torch` (only used for
dtypes of tensor loading, which this script never does).

One correction, for SmolLM2 only: transformers' conversion knows no "smollm" pre-tokenizer and
falls back to GPT-2's regex alone, while SmolLM2's own tokenizer.json (and llama.cpp for pre
"smollm") first splits every digit apart: Sequence[Digits(individual_digits=True), ByteLevel].
We set that pre-tokenizer; the script prints the cases where the uncorrected conversion differs.

If llama-cpp-python is installed, every case is also tokenized by llama.cpp
(Llama(vocab_only=True).tokenize(add_bos=False, special=...)) and disagreements are printed;
they are informational, the fixtures hold the Hugging Face ids.

Run (not part of CI):  /path/to/venv/bin/python testdata/make_tokenizer_golden.py [models_dir]
Needs: transformers, tokenizers, gguf, numpy (optional: llama-cpp-python).
"""

import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "models")

import transformers  # noqa: E402  (imported before any torch stand-in is installed)

try:
    import torch  # noqa: F401
except ImportError:

    class _Anything:
        def __init__(self, *a, **k):
            pass

        def __getattr__(self, name):
            return _Anything()

        def __call__(self, *a, **k):
            return _Anything()

    _stub = types.ModuleType("torch")
    _stub.__getattr__ = lambda name: _Anything()
    sys.modules["torch"] = _stub

from tokenizers import pre_tokenizers  # noqa: E402
from transformers.integrations.gguf import convert_gguf_tokenizer, get_gguf_tokenizer  # noqa: E402

COMMON = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "In 1905, Albert Einstein published four papers that changed physics; the third introduced "
    "special relativity, and the fourth derived E = mc^2 from it.",
    "don't I'LL we've they're she'd it's WE'VE O'Neil's 'quote' isn't",
    "café naïve résumé Ångström façade jalapeño Zürich",
    "日本語のテキストです。中文测试，你好！",
    "한국어 텍스트와 ไทย สวัสดีครับ नमस्ते दुनिया",
    "emoji: 🤗🚀👍🏽 👨‍👩‍👧 ❤️",
    "مرحبا بالعالم — שלום עולם",
    "Привет, мир! Ελληνικά κείμενα.",
    "1234567890 3.14159 1,000,000 2024-05-17 0x1F 1e-9",
    "99999999999999999999999999999999",
    "a  1 and b   22 and c\t333",
    "   leading spaces",
    "trailing spaces   ",
    "multiple    spaces   between     words",
    "tabs\tand\t\ttabs\t\t\t",
    "line1\nline2\n\nline3\r\nline4\n",
    "\n\n\n",
    " ",
    "",
    "def foo(x):\n    return x ** 2  # square\n\n\nclass Bar:\n\tpass\n",
    'int main() { printf("%d\\n", 42); return 0; }',
    "Hello!!! What?! ... (yes) [no] {maybe} \"quoted\" 'single' `tick` ~tilde~ @at #hash $5 %",
    "https://example.com/path?q=1&b=2 user@example.org C:\\Windows\\system32",
    "x² + y² = z², ½ ¾ ∑∫√∞ Ⅻ ①",
    "a\u00a0b\u2009c\u3000d\u0085e\u2028f",
    "ALL CAPS SHOUTING AND MiXeD cAsE",
    "e\u0301 n\u0303 combining marks",
    "\ufeffbom and zero\u200bwidth",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!!!!!!!!!!! ----------",
    " " * 40 + "x",
    "\n" * 40 + "y",
    "a" + " " * 33 + "b" + "\t" * 35 + "c",
    "control\x04chars\x13here\x1dand\x7fthere",
    "e  \x13<eos> a \x04(b",  # SmolLM2 drops 0x13/0x04 and merges their neighbours (" <", " (")
    "<b>bold</b> and <table><tr><td>x</td></tr></table>",
    "<|im_start|>user\nhi<|im_end|>",  # text, not special, where the vocabulary lacks them
    "<start_of_turn>user\nhi<end_of_turn>",
]

SPECIAL = {
    "smollm2": [
        ("<|im_start|>user\nhi<|im_end|>", True),
        ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
         "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", True),
        ("<|im_end|><|im_start|><|endoftext|>", True),
        ("hi<|endoftext|>bye", True),
        ("<|im_start <|im_start|", True),  # incomplete: plain text
        ("<|im_start|>user\nhi<|im_end|>", False),
        ("hi<|endoftext|>bye", False),
    ],
    "gemma3": [
        ("<start_of_turn>user\nhi<end_of_turn>", True),
        ("<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n", True),
        ("<end_of_turn><start_of_turn><eos>", True),
        ("hi<eos>bye<pad><unused0>", True),
        ("<start_of_turn <end_of_turn", True),  # incomplete: plain text
        ("<start_of_turn>user\nhi<end_of_turn>", False),
        ("hi<eos>bye", False),
        ("<b>hi</b>\n\n<start_of_turn>\t\t", False),  # user-defined tokens match regardless
    ],
}

MODELS_BY_NAME = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}


def hf_tokenizer(path, name):
    arch, tokenizer_dict, _ = get_gguf_tokenizer(path)
    tok, _ = convert_gguf_tokenizer(arch, tokenizer_dict)
    plain = None
    if name == "smollm2":
        assert tokenizer_dict.get("pre_tokenizer_type") == "smollm"
        plain = tok
        tok = tokenizers_copy(tok)
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    return tok, plain


def tokenizers_copy(tok):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tok.to_str())


def hf_encode(tok, text, parse_special):
    tok.encode_special_tokens = not parse_special
    try:
        return tok.encode(text, add_special_tokens=False).ids
    finally:
        tok.encode_special_tokens = False


def llama_cpp_vocab(path):
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)


def main():
    for name, file in MODELS_BY_NAME.items():
        path = os.path.join(MODELS, file)
        tok, plain = hf_tokenizer(path, name)
        special_ids = {i for i, t in tok.get_added_tokens_decoder().items() if t.special}
        llm = llama_cpp_vocab(path)
        cases = [(t, True) for t in COMMON] + SPECIAL[name]
        out = []
        n_llama_diff = 0
        for text, parse_special in cases:
            ids = hf_encode(tok, text, parse_special)
            case = {"text": text, "ids": ids}
            if not parse_special:
                case["parse_special"] = False
            case["roundtrip"] = not any(i in special_ids for i in ids) and tok.decode(ids, skip_special_tokens=False) == text
            out.append(case)
            if plain is not None:
                p = hf_encode(plain, text, parse_special)
                if p != ids:
                    print(f"[{name}] uncorrected HF conversion differs on {text!r}:\n  {p}\n  {ids}")
            if llm is not None:
                lids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=parse_special)
                if lids != ids:
                    n_llama_diff += 1
                    print(f"[{name}] llama.cpp differs on {text!r} (special={parse_special}):\n"
                          f"  llama.cpp {lids}\n  HF        {ids}")
        reference = "Hugging Face tokenizers %s via transformers %s GGUF conversion" % (
            __import__("tokenizers").__version__, transformers.__version__)
        if name == "smollm2":
            reference += ", pre-tokenizer Digits(individual)+ByteLevel as SmolLM2's tokenizer.json"
        doc = {"model": file, "reference": reference, "cases": out}
        dst = os.path.join(HERE, f"tokenizer_golden_{name}.json")
        with open(dst, "w", encoding="utf-8") as f:  # one case per line, for readable diffs
            head = json.dumps({k: v for k, v in doc.items() if k != "cases"}, ensure_ascii=False)[:-1]
            lines = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in out)
            f.write(head + ',\n "cases": [\n' + lines + "\n ]}\n")
        checked = "not run (llama-cpp-python missing)" if llm is None else f"{n_llama_diff} differ"
        print(f"{dst}: {len(out)} cases; llama.cpp cross-check: {checked}")


if __name__ == "__main__":
    main()
