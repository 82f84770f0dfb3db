#!/usr/bin/env python3
"""Write testdata/quant_golden.bin: raw ggml blocks and their dequantised floats as computed by an
independent implementation, gguf-py's `gguf.quants.dequantize`. tests/test-quant.cpp checks
ragkv's dequantize_row() against it. Committed, not run by CI; regenerate with

    /tmp/refenv/bin/python testdata/make_quant_fixtures.py        # needs numpy and gguf (gguf-py)

Blocks come from three sources: `gguf.quants.quantize` of seeded random data (types gguf-py can
quantise), seeded random block bytes with finite f16 scales (K-quants and extra coverage of every
bit pattern), and real blocks read from the two models in models/ when they are present (they are
optional: without them the script still writes a valid, smaller fixture). Deterministic: fixed seed.

File format (all integers little-endian):
    header:  magic b"RKQG" | u32 version (= 1) | u32 n_records
    record:  u32 ggml_type        (GGUF numbering, e.g. 12 = Q4_K)
             u32 n_elems          (a whole number of blocks)
             u32 n_bytes          (= n_elems / block_elems * block_bytes)
             u32 label_len | label (ASCII, says where the blocks came from)
             n_bytes raw block bytes
             n_elems f32 reference values (gguf.quants.dequantize of the raw bytes)
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES, GGUFReader
from gguf import quants

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "quant_golden.bin"
SMOLLM = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"

rng = np.random.default_rng(20240611)
records: list[tuple[T, bytes, np.ndarray, str]] = []


def add(qtype: T, raw: np.ndarray, label: str) -> None:
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    assert raw.size % block_bytes == 0, (qtype.name, raw.size)
    ref = np.asarray(quants.dequantize(raw, qtype), dtype=np.float32).reshape(-1)
    assert ref.size == raw.size // block_bytes * block_elems
    assert not np.isnan(ref).any(), label
    records.append((qtype, raw.tobytes(), ref, label))


def random_f16(n: int, lo: float, hi: float, signed: bool = True) -> np.ndarray:
    """n finite f16 values with magnitudes log-uniform in [lo, hi], as raw bytes (n, 2)."""
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    if signed:
        mag *= rng.choice([-1.0, 1.0], n)
    return mag.astype(np.float16).view(np.uint8).reshape(n, 2)


def random_blocks(qtype: T, n_blocks: int, scale_offsets: list[int], lo=1e-4, hi=0.05) -> np.ndarray:
    """Random block bytes with finite f16 scales at the given byte offsets of each block."""
    _, block_bytes = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        blocks[:, off:off + 2] = random_f16(n_blocks, lo, hi)
    return blocks


def quantized(qtype: T, n_blocks: int) -> np.ndarray:
    block_elems, _ = GGML_QUANT_SIZES[qtype]
    x = rng.normal(0.0, 0.05, size=(n_blocks, block_elems)).astype(np.float32)
    x[0] += 0.03  # a block with a non-zero mean, for the types with a min
    if n_blocks > 2:
        x[2] = 0.0  # an all-zero block (scale 0)
    return quants.quantize(x, qtype)


def model_blocks(reader: GGUFReader | None, qtype: T, n_blocks: int, row: int) -> tuple[np.ndarray, str] | None:
    """The first n_blocks blocks of one row of the first tensor of type qtype in a model."""
    if reader is None:
        return None
    for t in reader.tensors:
        if t.tensor_type == qtype:
            _, block_bytes = GGML_QUANT_SIZES[qtype]
            data = np.asarray(t.data)
            r = min(row, data.shape[0] - 1)
            return data[r, : n_blocks * block_bytes].copy(), f"{t.name} row {r}"
    return None


def open_model(path: Path) -> GGUFReader | None:
    if not path.exists():
        print(f"note: {path} not found, skipping its real blocks", file=sys.stderr)
        return None
    return GGUFReader(path)


smollm = open_model(SMOLLM)
gemma = open_model(GEMMA)

# --- plain float types --------------------------------------------------------------------
add(T.F32, rng.normal(0, 1, 16).astype(np.float32).view(np.uint8), "F32 random")

# F16: special values, then random bit patterns (every exponent incl. subnormals and inf, no NaN).
special = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff,
                    0x7c00, 0xfc00, 0x3c00, 0xbc00, 0x3555, 0x0200, 0x3bff, 0x3c01], dtype=np.uint16)
bits = rng.integers(0, 1 << 16, size=496, dtype=np.uint16)
bits = bits[((bits >> 10) & 0x1F) != 0x1F]  # drop inf/NaN exponent, then pad with the specials
f16 = np.concatenate([special, bits])[:256]
assert f16.size == 256
add(T.F16, f16.view(np.uint8), "F16 specials + random bit patterns")

# BF16: random bit patterns, no NaN (inf and subnormals allowed).
special = np.array([0x0000, 0x8000, 0x0001, 0x7f7f, 0x7f80, 0xff80, 0x3f80, 0xbf80], dtype=np.uint16)
bits = rng.integers(0, 1 << 16, size=400, dtype=np.uint16)
bits = bits[~((((bits >> 7) & 0xFF) == 0xFF) & ((bits & 0x7F) != 0))]
bf16 = np.concatenate([special, bits])[:256]
add(T.BF16, bf16.view(np.uint8), "BF16 specials + random bit patterns")

# --- legacy 32-element block types ----------------------------------------------------------
# (type, byte offsets of f16 fields in a block)
legacy = [(T.Q8_0, [0]), (T.Q4_0, [0]), (T.Q4_1, [0, 2]), (T.Q5_0, [0]), (T.Q5_1, [0, 2])]
for qtype, f16_offsets in legacy:
    add(qtype, quantized(qtype, 6), f"{qtype.name} gguf.quants.quantize of random normal data")
    add(qtype, random_blocks(qtype, 4, f16_offsets), f"{qtype.name} random block bytes")

for reader, name, qtype in [(smollm, "SmolLM2", T.Q8_0), (smollm, "SmolLM2", T.Q4_1),
                            (gemma, "gemma-3", T.Q5_0), (gemma, "gemma-3", T.Q8_0)]:
    got = model_blocks(reader, qtype, 4, row=7)
    if got is not None:
        add(qtype, got[0], f"{qtype.name} {name} {got[1]}")

# --- K-quants (256-element super-blocks); gguf-py cannot quantise these ---------------------
# f16 fields: Q4_K/Q5_K {d, dmin} at 0 and 2; Q6_K d at byte 208.
for qtype, f16_offsets in [(T.Q4_K, [0, 2]), (T.Q5_K, [0, 2]), (T.Q6_K, [208])]:
    hi = 0.002 if qtype == T.Q6_K else 0.05  # Q6_K scales are i8, up to +-128
    add(qtype, random_blocks(qtype, 4, f16_offsets, hi=hi), f"{qtype.name} random block bytes")

for qtype in [T.Q4_K, T.Q6_K]:
    got = model_blocks(gemma, qtype, 3, row=5)
    if got is not None:
        add(qtype, got[0], f"{qtype.name} gemma-3 {got[1]}")

# --- write ----------------------------------------------------------------------------------
with open(OUT, "wb") as f:
    f.write(b"RKQG" + struct.pack("<II", 1, len(records)))
    for qtype, raw, ref, label in records:
        lab = label.encode("ascii")
        f.write(struct.pack("<IIII", int(qtype), ref.size, len(raw), len(lab)))
        f.write(lab)
        f.write(raw)
        f.write(ref.astype("<f4").tobytes())

print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(records)} records)")
for qtype, raw, ref, label in records:
    print(f"  {qtype.name:5s} {ref.size:4d} elems  {label}")
