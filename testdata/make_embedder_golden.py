#!/usr/bin/env python3
"""Golden sentence embeddings and WordPiece ids for tests/test-embedder.cpp.

Writes testdata/embedder_golden.json:
    {"model": "all-MiniLM-L6-v2", "reference": <what produced the data>, "max_seq_length": 256,
     "dim": 384, "cases": [{"text": ..., "ids": [...], "embedding": [384 floats]}]}
ids are the reference tokenizer's input_ids for the sentence alone ([CLS] ... [SEP], truncated to
max_seq_length); embedding is the reference's normalised sentence embedding, rounded to 6
decimals.

Reference: sentence-transformers (SentenceTransformer.encode, CPU, float32) on the model folder
that `make setup` fetched into models/all-MiniLM-L6-v2. That folder is complete except for
1_Pooling/config.json, which sentence-transformers needs: the script assembles a copy in a
temporary directory (symlinks to the original files) and adds the pooling config of the
published model (mean pooling over the 384-dim token embeddings). The ids come from the same
object's tokenizer (SentenceTransformer.tokenize, the Hugging Face fast tokenizer). As a cross
check the script recomputes every embedding with plain transformers (AutoModel + mean pooling
over the attention mask + L2 normalisation, one sentence at a time, no padding) and prints the
largest difference; it fails if any cosine between the two is below 0.99999.

Run (not part of CI):  HF_HUB_OFFLINE=1 /path/to/venv/bin/python testdata/make_embedder_golden.py [models_dir]
Needs: sentence-transformers, transformers, torch, numpy.
"""

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "models")
MODEL_DIR = os.path.abspath(os.path.join(MODELS, "all-MiniLM-L6-v2"))
OUT = os.path.join(HERE, "embedder_golden.json")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

LONG_1 = (
    "The history of computing is longer than the history of computing hardware and modern "
    "computing technology and includes the history of methods intended for pen and paper or for "
    "chalk and slate, with or without the aid of tables. Digital computing is intimately tied to "
    "the representation of numbers. But long before abstractions like the number arose, there "
    "were mathematical concepts to serve the purposes of civilization. These concepts are "
    "implicit in concrete practices such as one-to-one correspondence, the basis of counting, and "
    "comparison to a standard, used for measurement. The earliest known tool for use in "
    "computation was the abacus, thought to have been invented in Babylon circa 2400 BC. Its "
    "original style of usage was by lines drawn in sand with pebbles. Abaci of a more modern "
    "design are still used as calculation tools today. In the 17th century, John Napier "
    "introduced logarithms, and shortly afterwards the slide rule was invented, which remained in "
    "use by engineers and scientists until the arrival of the pocket calculator in the 1970s. "
    "Charles Babbage designed the Analytical Engine in 1837; it was never completed, but Ada "
    "Lovelace wrote what is considered the first algorithm intended to be carried out by such a "
    "machine. In the twentieth century, electromechanical relays gave way to vacuum tubes, then "
    "to transistors and integrated circuits, and the stored-program architecture described by "
    "John von Neumann in 1945 became the template of nearly every general-purpose computer built "
    "since. Each generation was smaller, faster, cheaper and more reliable than the last, and "
    "the number of transistors on a chip doubled roughly every two years for half a century, an "
    "observation known as Moore's law."
)

LONG_2 = (
    "Photosynthesis is the process by which green plants, algae and some bacteria convert light "
    "energy into chemical energy. During photosynthesis, light energy is captured and used to "
    "convert water, carbon dioxide and minerals into oxygen and energy-rich organic compounds. "
    "It would be impossible to overestimate the importance of photosynthesis in the maintenance "
    "of life on Earth. If photosynthesis ceased, there would soon be little food or other organic "
    "matter on Earth, most organisms would disappear, and the atmosphere would eventually become "
    "nearly devoid of gaseous oxygen. " * 3
)

MEDIUM = (
    "Retrieval-augmented generation (RAG) combines a search step with a language model: the "
    "question is embedded, the nearest passages are retrieved from an index, and the passages "
    "are placed in the prompt so the model can answer from them instead of from memory alone."
)

SENTENCES = [
    "",
    "Hello world!",
    "a",
    "The quick brown fox jumps over the lazy dog.",
    "THE UNITED NATIONS GENERAL ASSEMBLY MET IN NEW YORK ON TUESDAY.",
    "Café crème brûlée à la carte — naïve résumé, São Paulo, Zürich, Ångström, jalapeño.",
    "Straße und Übermut: Größenwahn ist kein Ärgernis.",
    "İstanbul'da ıslak bir gün; ÇĞÖŞÜ çğöşü.",
    "北京是中华人民共和国的首都，也是世界著名古都。",
    "東京タワーは日本の東京都港区にある電波塔です。",
    "서울은 대한민국의 수도입니다.",
    "Ελληνικά: Αθήνα. Русский: Москва — столица России.",
    "مرحبا بالعالم. שלום עולם. नमस्ते दुनिया",
    "In 2023, revenue grew 12.5% to $4,567,890.12 (vs. 3.14e-5 in Q3); call +1-800-555-0199.",
    "Wait... what?! \"Quoted\" text, (parentheses) [brackets] {braces} <angles> & @ # ~ ` ^ | \\ /",
    "tabs\tand\nnewlines\r\n  multiple   spaces\u00a0nbsp\u200bzero\u00adsoft\u0007bell\ufeffbom",
    "I love pizza 🍕 and coffee ☕️ 😀👍🏽 🥰",
    "[CLS] this has [SEP] special [MASK] tokens [UNK] inside [PAD] and [cls] lower",
    "a" * 120 + " supercalifragilisticexpialidocious antidisestablishmentarianism",
    "def f(x): return x**2 + 1  # square plus one; int main() { return 0; }",
    "Visit https://example.com/path?q=1&r=two or mail info@example.org today.",
    "ＡＢＣ１２３　全角文字 and ﬁ ligature, ① ½ x² ≤ ∞ ± √2 ≈ 1.414 °C µm",
    "e\u0301 n\u0303 combining marks and \u1e9e capital sharp s",
    "?!...",
    "   \t\n  ",
    MEDIUM,
    LONG_1,
    LONG_2,
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome.",
    "The cat sits outside.",
]


def assemble_st_folder(tmp):
    """Copy of MODEL_DIR (symlinks) plus the 1_Pooling/config.json sentence-transformers needs."""
    dst = os.path.join(tmp, "all-MiniLM-L6-v2")
    os.makedirs(os.path.join(dst, "1_Pooling"))
    for name in os.listdir(MODEL_DIR):
        os.symlink(os.path.join(MODEL_DIR, name), os.path.join(dst, name))
    pooling = {
        "word_embedding_dimension": 384,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
    }
    with open(os.path.join(dst, "1_Pooling", "config.json"), "w") as f:
        json.dump(pooling, f)
    if not os.path.exists(os.path.join(dst, "2_Normalize")):
        os.makedirs(os.path.join(dst, "2_Normalize"))
    return dst


def transformers_embeddings(texts, max_len):
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    model = AutoModel.from_pretrained(MODEL_DIR, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for t in texts:
            enc = tok(t, truncation=True, max_length=max_len, return_tensors="pt")
            h = model(**enc).last_hidden_state[0]  # [n_tok][384]
            v = h.mean(dim=0)
            out.append((v / v.norm()).numpy())
    return np.stack(out)


def main():
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with tempfile.TemporaryDirectory() as tmp:
        st = SentenceTransformer(assemble_st_folder(tmp), device="cpu")
        max_len = st.max_seq_length
        assert max_len == 256, max_len
        emb = st.encode(SENTENCES, batch_size=32, convert_to_numpy=True, normalize_embeddings=True)
        # SentenceTransformer.preprocess (tokenize in older versions): the tokenization encode uses.
        prep = getattr(st, "preprocess", None) or st.tokenize
        ids = [prep([t])["input_ids"][0].tolist() for t in SENTENCES]

    check = transformers_embeddings(SENTENCES, max_len)
    cos = (emb * check).sum(axis=1)
    print(f"sentence-transformers vs transformers+mean pooling: min cosine {cos.min():.8f}, "
          f"max |diff| {np.abs(emb - check).max():.2e}")
    assert cos.min() > 0.99999

    cases = []
    for t, i, e in zip(SENTENCES, ids, emb):
        cases.append({"text": t, "ids": i, "embedding": [round(float(x), 6) for x in e]})
    n_trunc = sum(1 for i in ids if len(i) == max_len)
    print(f"{len(cases)} cases, {n_trunc} truncated to {max_len} tokens, "
          f"lengths {min(len(i) for i in ids)}..{max(len(i) for i in ids)}")
    import sentence_transformers
    import transformers
    doc = {
        "model": "all-MiniLM-L6-v2",
        "reference": f"sentence-transformers {sentence_transformers.__version__} "
                     f"(transformers {transformers.__version__}, torch {torch.__version__}), "
                     "SentenceTransformer.encode on CPU float32, mean pooling, normalize_embeddings=True",
        "max_seq_length": max_len,
        "dim": int(emb.shape[1]),
        "cases": cases,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
