"""Shared pieces of the hybrid (kimi-linear) tests: the files, the test prompts and llama.cpp's
logits for them (llama-cpp-python, the peer)."""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
TYPES = ("F32", "F16", "Q8_0", "Q4_1")
N_VOCAB = 49152


def tiny(wtype: str = "F32") -> Path:
    return MODELS / f"hybrid-tiny.{wtype}.gguf"


def recorded_sum(name: str) -> str:
    for line in (MODELS / "SHA256SUMS").read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == name:
            return parts[0]
    raise AssertionError(f"{name} has no line in models/SHA256SUMS")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def random_ids(seed: int, n: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(3, N_VOCAB, n)]


CHAT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n"
        "<|im_start|>assistant\n")
TEXTS = {
    "chat": CHAT.format("Explain in two sentences why the sky is blue."),
    "code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n    for _ in range(n):\n",
}
# Random-id prompts: (name, seed, length). Lengths around llama.cpp's chunk of 64 and its 512-token
# batch (1,000 tokens run as 512 + 488 there). Seeds chosen so no top-k expert choice along the
# prompt is a near tie (the tests check the reference's smallest router margin, MARGIN_FLOOR).
RANDOM = (("ids1", 11, 1), ("ids65", 12, 65), ("ids333", 13, 333), ("ids1000", 16, 1000))
DECODE_TAIL = 4     # the last tokens of each prompt go to llama.cpp one at a time (its recurrent path)


@lru_cache(maxsize=None)
def prompt_ids() -> dict[str, tuple[int, ...]]:
    """Every test prompt as token ids; the text prompts tokenized by llama.cpp (special tokens parsed,
    no BOS), which the file's copied SmolLM2 tokenizer must make the same as SmolLM2's."""
    from llama_cpp import Llama
    m = Llama(model_path=str(tiny("F32")), n_ctx=64, verbose=False, vocab_only=True)
    out = {name: tuple(m.tokenize(text.encode(), add_bos=False, special=True)) for name, text in TEXTS.items()}
    for name, seed, n in RANDOM:
        out[name] = tuple(random_ids(seed, n))
    return out


def llamacpp_logits(path: Path, ids, tail: int = DECODE_TAIL) -> np.ndarray:
    """llama.cpp's logits at every position: the prompt but its last `tail` tokens in one eval
    (batches of 512, its chunked KDA path), then those one at a time (its recurrent path, the state
    carried). F32 KV cache, so only arithmetic differs from the reference."""
    from llama_cpp import Llama
    ids = list(ids)
    m = Llama(model_path=str(path), n_ctx=2048, n_batch=512, n_ubatch=512, logits_all=True,
              verbose=False, n_threads=2, type_k=0, type_v=0)
    head = max(1, len(ids) - tail)
    m.eval(ids[:head])
    for t in ids[head:]:
        m.eval([t])
    return np.array(m.scores[: len(ids)], dtype=np.float64)


def row_nmse(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    d = got - ref
    return (d * d).sum(axis=1) / (ref * ref).sum(axis=1)


def top2_margin(row: np.ndarray) -> float:
    a, b = np.partition(row, -2)[-2:]
    return float(abs(a - b))
