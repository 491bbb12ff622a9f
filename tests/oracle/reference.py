"""Independent numpy reference forward pass for llama-architecture GGUF models (the logits oracle).

Written from the model equations, reading tensors straight from the GGUF with the `gguf` package:

    x_0     = token_embd[ids]
    h       = x + W_o . attn(rope(W_q . n), rope(W_k . n), W_v . n),   n = rmsnorm(x) * attn_norm
    x'      = h + W_down . (silu(W_gate . m) * (W_up . m)),            m = rmsnorm(h) * ffn_norm
    logits  = (rmsnorm(x_L) * output_norm) . output^T    (output = token_embd when output.weight is absent)

RoPE layout: llama.cpp's converter permutes the rows of attn_q / attn_k of each head
(reshape(n_head, 2, hd/2, ...).swapaxes(1, 2)), so in the GGUF the rotated pairs are the ADJACENT
dimensions (2i, 2i+1) of a head, with angle pos * base^(-2i/hd)  ("normal" rope mode in ggml).

Math is float64 throughout (weights dequantized, then widened). Two IEEE-correct BLAS libraries
summing in different orders then agree to ~1e-13 relative, so the result does not depend on the
host's numpy/BLAS build; in particular the simulated int8 rounding (`q8_act`) takes the same
decisions everywhere (a float32 reference did not: one host's BLAS moved a worst-row NMSE from
3.5e-2 to 0.103 through chaotic rounding flips). Logits are returned as float32. Dequantized
weights are cached per process. Keyword-only options of `forward` exist only so the test
suite can simulate engine behaviour (int8 activations) and known bugs (wrong rope / GQA / positions)
to calibrate its tolerances; the defaults are the correct model.
"""
from __future__ import annotations

import functools
import os
import pathlib

import numpy as np
import gguf

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_MODEL = pathlib.Path(os.environ.get("OURO_TEST_MODEL",
                                            ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))


class Model:
    def __init__(self, path):
        r = gguf.GGUFReader(str(path))
        arch = r.fields["general.architecture"].contents()
        if arch != "llama":
            raise ValueError(f"reference supports llama only, got {arch}")
        meta = lambda k, default=None: (r.fields[f"{arch}.{k}"].contents() if f"{arch}.{k}" in r.fields
                                        else default)
        self.n_layer = int(meta("block_count"))
        self.d_model = int(meta("embedding_length"))
        self.n_head = int(meta("attention.head_count"))
        self.n_kv_head = int(meta("attention.head_count_kv", self.n_head))
        self.head_dim = self.d_model // self.n_head
        self.n_rot = int(meta("rope.dimension_count", self.head_dim))
        self.rope_base = float(meta("rope.freq_base", 10000.0))
        self.eps = float(meta("attention.layer_norm_rms_epsilon"))
        self.tokens = r.fields["tokenizer.ggml.tokens"].contents()

        # gguf shape [ne0, ne1] = [in, out]; dequantize gives numpy shape (out, in) = PyTorch layout
        deq = lambda t: gguf.quants.dequantize(t.data, t.tensor_type)
        self.w = {t.name: np.ascontiguousarray(deq(t), dtype=np.float64) for t in r.tensors}
        self.tok_embd = self.w["token_embd.weight"]
        self.output = self.w.get("output.weight", self.tok_embd)   # tied embeddings
        self.n_vocab = self.output.shape[0]


def load(path=DEFAULT_MODEL) -> Model:
    """The model at path, dequantized once per process."""
    return _load(str(pathlib.Path(path).resolve()))


@functools.lru_cache(maxsize=2)
def _load(path) -> Model:
    return Model(path)


def rmsnorm(x, w, eps):
    ms = np.mean(x ** 2, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * w


def quant_q8(x):
    """Simulates 8-bit block activations like llama.cpp's Q8_0/Q8_1: blocks of 32 along the last axis,
    d = amax/127, q = round(x/d) in [-127, 127], value = q * fp16(d)."""
    n, k = x.shape
    b = x.reshape(n, k // 32, 32)
    d = np.abs(b).max(axis=-1, keepdims=True) / 127.0
    q = np.round(b * np.divide(1.0, d, out=np.zeros_like(d), where=d > 0))
    return (q * d.astype(np.float16).astype(np.float64)).reshape(n, k)


def rope(x, pos, n_rot, base, neox=False):
    """x: [n, heads, hd]. Rotates pairs (2i, 2i+1) (ggml normal mode) or (i, i + n_rot/2) if neox."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    ang = pos[:, None].astype(np.float64) * base ** (-2.0 * i / n_rot)        # [n, n_rot/2]
    cos = np.cos(ang)[:, None, :]
    sin = np.sin(ang)[:, None, :]
    out = x.copy()
    if neox:
        a, b = x[..., : n_rot // 2], x[..., n_rot // 2: n_rot]
        out[..., : n_rot // 2], out[..., n_rot // 2: n_rot] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2], out[..., 1:n_rot:2] = a * cos - b * sin, a * sin + b * cos
    return out


def forward(token_ids, model_path=DEFAULT_MODEL, *, q8_act=False, neox_rope=False,
            gqa_modulo=False, mask_offset=1, rope_base=None) -> np.ndarray:
    """Logits [n_tokens, n_vocab] (float32) of one causal prefill over token_ids from position 0."""
    m = load(model_path)
    ids = np.asarray(token_ids, dtype=np.int64)
    n, hd, nh, nkv = len(ids), m.head_dim, m.n_head, m.n_kv_head
    mm = (lambda a, w: quant_q8(a) @ w) if q8_act else (lambda a, w: a @ w)
    pos = np.arange(n)
    base = m.rope_base if rope_base is None else rope_base
    causal = np.triu(np.full((n, n), -np.inf), k=mask_offset)                 # key j visible iff j <= i
    x = m.tok_embd[ids].copy()                                                 # [n, d]

    for l in range(m.n_layer):
        W = lambda name: m.w[f"blk.{l}.{name}.weight"].T                       # (in, out) view
        h = rmsnorm(x, m.w[f"blk.{l}.attn_norm.weight"], m.eps)
        q = rope(mm(h, W("attn_q")).reshape(n, nh, hd), pos, m.n_rot, base, neox_rope)
        k = rope(mm(h, W("attn_k")).reshape(n, nkv, hd), pos, m.n_rot, base, neox_rope)
        v = mm(h, W("attn_v")).reshape(n, nkv, hd)
        att = np.empty((n, nh, hd), dtype=np.float64)
        for head in range(nh):
            kv = head % nkv if gqa_modulo else head // (nh // nkv)              # GQA: groups of nh/nkv
            s = (q[:, head, :] @ k[:, kv, :].T) / np.sqrt(hd) + causal
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            att[:, head, :] = p @ v[:, kv, :]
        x = x + mm(att.reshape(n, nh * hd), W("attn_output"))

        h = rmsnorm(x, m.w[f"blk.{l}.ffn_norm.weight"], m.eps)
        g, u = mm(h, W("ffn_gate")), mm(h, W("ffn_up"))
        x = x + mm(g / (1.0 + np.exp(-g)) * u, W("ffn_down"))                   # SwiGLU

    x = rmsnorm(x, m.w["output_norm.weight"], m.eps)
    return np.ascontiguousarray(mm(x, m.output.T), dtype=np.float32)


def greedy(token_ids, n_new, model_path=DEFAULT_MODEL, stop=None):
    """Greedy continuation by full recomputation (slow but obviously correct)."""
    ids = list(token_ids)
    for _ in range(n_new):
        nxt = int(np.argmax(forward(ids, model_path)[-1]))
        ids.append(nxt)
        if stop is not None and nxt == stop:
            break
    return ids[len(token_ids):]


def detokenize(ids, model_path=DEFAULT_MODEL):
    """Byte-level BPE detokenization from the GGUF vocab (GPT-2 byte<->unicode map)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, extra = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + extra); extra += 1
    dec = {chr(c): b for b, c in zip(bs, cs)}
    toks = load(model_path).tokens
    return b"".join(bytes(dec[ch] for ch in toks[i]) if all(ch in dec for ch in toks[i])
                    else toks[i].encode() for i in ids).decode("utf-8", errors="replace")


if __name__ == "__main__":   # self-check: greedy answer to a ChatML question
    chat = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
    print(repr(detokenize(greedy(chat, 12, stop=2))))   # expect: 'The capital of France is Paris.<|im_end|>'


def path_margins(prompt_ids, out_ids, model_path=DEFAULT_MODEL):
    """Teacher-forced check of a greedy output: one prefill over prompt + out_ids[:-1], and for each
    output position the reference's argmax and its top-2 logit margin. A test that needs a particular
    greedy text asserts argmax == out_ids (the engine followed the reference) and a minimum margin
    (no kernel family's rounding can land on the other side of a tie)."""
    n = len(prompt_ids)
    logits = forward(list(prompt_ids) + list(out_ids[:-1]), model_path).astype(np.float64)[n - 1:]
    top2 = np.sort(logits, axis=-1)[:, -2:]
    return [int(i) for i in np.argmax(logits, axis=-1)], [float(a - b) for b, a in top2]
