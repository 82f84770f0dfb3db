#!/usr/bin/env python3
"""Unicode tables of the BERT basic tokenizer for core/model/wordpiece.cpp.

Writes core/model/wordpiece-unicode.inc. Every table is measured on the reference itself, one code
point at a time: Hugging Face `tokenizers` (the Rust library behind the fast BertTokenizer that
sentence-transformers runs), so ragkv classifies each character exactly as the reference does,
whatever Unicode version the reference's crates were built with:

  removed      BertNormalizer(clean_text) deletes the character (U+0000, U+FFFD, control/format/
               private-use characters)
  whitespace   BertNormalizer(clean_text) turns it into ' '
  chinese      BertNormalizer(handle_chinese_chars) puts spaces around it
  punctuation  BertPreTokenizer makes it a word of its own
  strip        BertNormalizer(strip_accents): NFD then drop nonspacing marks (Mn); characters
               removed entirely are listed as ranges, the rest as mappings (Hangul syllables are
               left out: wordpiece.cpp decomposes them algorithmically, checked here)
  lower        BertNormalizer(lowercase): Rust's char::to_lowercase

The one thing per-character tables cannot express is NFD's canonical reordering of combining
marks inside a string; after the nonspacing marks are dropped it only matters for a handful of
spacing marks with a non-zero combining class. The script checks random strings end to end and
prints how many differ (expected: none).

Run (not part of CI):  /path/to/venv/bin/python scripts/make_wordpiece_tables.py
Needs: tokenizers.
"""

import os
import random

import tokenizers
from tokenizers import normalizers, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "model", "wordpiece-unicode.inc")


def bert(clean=False, chinese=False, strip=False, lower=False):
    return normalizers.BertNormalizer(clean_text=clean, handle_chinese_chars=chinese,
                                      strip_accents=strip, lowercase=lower)


CLEAN, CHINESE, STRIP, LOWER = bert(clean=True), bert(chinese=True), bert(strip=True), bert(lower=True)
PRE = pre_tokenizers.BertPreTokenizer()

S_BASE, L_BASE, V_BASE, T_BASE, N_V, N_T = 0xAC00, 0x1100, 0x1161, 0x11A7, 21, 28
N_S = 19 * N_V * N_T


def hangul_nfd(c):
    s = c - S_BASE
    out = [L_BASE + s // (N_V * N_T), V_BASE + (s % (N_V * N_T)) // N_T]
    if s % N_T:
        out.append(T_BASE + s % N_T)
    return "".join(map(chr, out))


def code_points():
    return (c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def measure():
    t = dict(removed=[], whitespace=[], chinese=[], punctuation=[], strip_removed=[], strip={}, lower={})
    for c in code_points():
        s = chr(c)
        r = CLEAN.normalize_str(s)
        if r == "":
            t["removed"].append(c)
        elif r == " " and s != " ":
            t["whitespace"].append(c)
        else:
            assert r == s, (hex(c), r)
        if CHINESE.normalize_str(s) != s:
            t["chinese"].append(c)
        if r == s and not s.isspace() and c != 0x20:
            if len(PRE.pre_tokenize_str("a" + s + "b")) == 3:
                t["punctuation"].append(c)
        r = STRIP.normalize_str(s)
        if r != s:
            if S_BASE <= c < S_BASE + N_S:
                assert r == hangul_nfd(c), hex(c)
            elif r == "":
                t["strip_removed"].append(c)
            else:
                t["strip"][c] = r
        r = LOWER.normalize_str(s)
        if r != s:
            t["lower"][c] = r
    return t


def apply(t, text, lower):
    """The C++ pipeline over per-character tables, for the end-to-end check."""
    rem, ws, chi, srem = t["sets"]
    out = []
    for ch in text:
        c = ord(ch)
        if c in rem:
            continue
        if c in ws:
            out.append(" ")
        elif c in chi:
            out.append(" " + ch + " ")
        else:
            out.append(ch)
    s = "".join(out)
    if lower:
        out = []
        for ch in s:
            c = ord(ch)
            if c in srem:
                continue
            if S_BASE <= c < S_BASE + N_S:
                out.append(hangul_nfd(c))
            else:
                out.append(t["strip"].get(c, ch))
        s = "".join(out)
        s = "".join(t["lower"].get(ord(ch), ch) for ch in s)
    return s


def check_strings(t):
    full = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)
    t["sets"] = tuple(set(t[k]) for k in ("removed", "whitespace", "chinese", "strip_removed"))
    rng = random.Random(1)
    pool = [c for c in code_points() if c < 0x3000 or 0xAC00 <= c < 0xAC40 or 0x4E00 <= c < 0x4E40]
    marks = [c for c in range(0x300, 0x370)] + t["strip_removed"][:200]
    bad = 0
    for _ in range(20000):
        n = rng.randint(1, 12)
        s = "".join(chr(rng.choice(marks if rng.random() < 0.3 else pool)) for _ in range(n))
        if apply(t, s, True) != full.normalize_str(s):
            bad += 1
    return bad


def fmt_ranges(name, comment, cps):
    items = [f"{{0x{a:X}, 0x{b:X}}}" for a, b in ranges(cps)]
    return f"// {comment} ({len(cps)} code points)\ninline constexpr Range {name}[] = {{{wrap(items)}}};\n"


def fmt_maps(name, comment, m):
    assert max(len(v) for v in m.values()) <= 4
    items = []
    for c in sorted(m):
        outs = ", ".join(f"0x{ord(x):X}" for x in m[c])
        items.append(f"{{0x{c:X}, {len(m[c])}, {{{outs}}}}}")
    return f"// {comment} ({len(m)} code points)\ninline constexpr Mapping {name}[] = {{{wrap(items)}}};\n"


def wrap(items, width=98):
    lines, cur = [], ""
    for it in items:
        if cur and len(cur) + len(it) + 2 > width:
            lines.append(cur + ",")
            cur = ""
        cur += (", " if cur else "") + it
    lines.append(cur)
    return "\n    " + "\n    ".join(lines) + "\n"


def main():
    t = measure()
    bad = check_strings(t)
    print(f"random strings where the per-character tables differ from the reference: {bad} of 20000")
    head = (
        "// Generated by scripts/make_wordpiece_tables.py from Hugging Face tokenizers "
        f"{tokenizers.__version__}\n"
        "// (BertNormalizer, BertPreTokenizer measured one code point at a time). Do not edit.\n"
        "// Included by core/model/wordpiece.cpp only. Ranges are inclusive and sorted.\n"
        "// NOLINTBEGIN\n"
    )
    parts = [
        head,
        fmt_ranges("kRemoved", "clean_text deletes", t["removed"]),
        fmt_ranges("kWhitespace", "clean_text turns into ' '", t["whitespace"]),
        fmt_ranges("kChinese", "handle_chinese_chars puts spaces around", t["chinese"]),
        fmt_ranges("kPunctuation", "BertPreTokenizer splits off as one-character words", t["punctuation"]),
        fmt_ranges("kStripRemoved", "strip_accents deletes (nonspacing marks)", t["strip_removed"]),
        fmt_maps("kStripMap", "strip_accents maps (NFD without nonspacing marks; Hangul syllables not listed)",
                 t["strip"]),
        fmt_maps("kLowerMap", "lowercase maps", t["lower"]),
        "// NOLINTEND\n",
    ]
    with open(OUT, "w") as f:
        f.write("\n".join(parts))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
