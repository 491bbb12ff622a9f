#!/usr/bin/env python3
"""Writes synthetic `kimi-linear` GGUF files: the hybrid KDA + MLA + MoE architecture that
llama.cpp reads as `kimi-linear`, with random (seeded, deterministic) weights and the SmolLM2
tokenizer and chat template copied in, so text prompts, chat and the server work on them.

No small real hybrid weights exist in the registries this project reaches, so the files are made
here; llama.cpp (llama-cpp-python) reads the same file and is one oracle, tests/oracle/hybrid_ref.py
(float64 numpy) the other. The text the files generate is meaningless; checks compare with oracles.

    scripts/make_hybrid_model.py --size tiny --types F32,F16,Q8_0,Q4_1 --out models/
    scripts/make_hybrid_model.py --size small --types Q8_0,Q4_1 --out models/
    scripts/make_hybrid_model.py --size tiny --types F32 --bad missing-tensor --out /tmp/
    scripts/make_hybrid_model.py --size small --summary        # parameters, active share, bytes

Layer pattern as GLM-5.3-Flash and Kimi Linear: KDA layers, except every fourth layer (0-based 3,
7, ...) which is MLA; the first layer has a dense SiLU-gated FFN, the rest MoE (sigmoid router with
a selection bias, top-k, renormalised, scaled, plus one shared expert). MLA has no RoPE (llama.cpp's
kimi-linear applies none). docs/hybrid.md says how the weights are scaled and why.

Tensor types follow llama.cpp's quantizer (src/llama-quant.cpp): only 2-D/3-D tensors whose name
ends in "weight" take the file's type; norms, the router (ffn_gate_inp), the conv1d taps and the
biases stay F32. One exception, in docs/hybrid.md: the Q4_1 file's `output` is Q8_0 where llama.cpp
would pick Q6_K (gguf-py has no K-quant quantizer).

Tensors are generated, converted and written one at a time (the header first, from their shapes),
so hybrid-small's F32 file (~7 GB) never sits in memory.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import math
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

ARCH = "kimi-linear"


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    n_embd: int
    n_layer: int
    n_head: int            # KDA heads and MLA heads (llama.cpp's attention.head_count)
    head_dim: int          # KDA head dim (kda.head_dim)
    d_conv: int            # short conv kernel (ssm.conv_kernel)
    kv_lora_rank: int      # MLA latent size
    qk_nope: int           # MLA per-head no-RoPE query/key part
    qk_rope: int           # MLA per-head "rope" part (shared key part; no rotation applied)
    v_head: int            # MLA per-head value size
    n_ff: int              # dense FFN (leading layers)
    n_ff_exp: int          # each expert's FFN
    n_expert: int
    n_expert_used: int
    n_expert_shared: int
    n_dense_lead: int
    expert_weights_scale: float
    n_ctx_train: int


SHAPES = {
    # Tests: 8 layers (MLA at 3 and 7), 8 experts; ~29 MB in F32 with the 49,152-token vocabulary,
    # of which the F32 embedding and LM head are 25 MB.
    "tiny": Shape("hybrid-tiny", n_embd=64, n_layer=8, n_head=2, head_dim=128, d_conv=4,
                  kv_lora_rank=64, qk_nope=32, qk_rope=16, v_head=32, n_ff=128, n_ff_exp=32,
                  n_expert=8, n_expert_used=2, n_expert_shared=1, n_dense_lead=1,
                  expert_weights_scale=2.5, n_ctx_train=8192),
    # Benchmarks: 16 layers (MLA at 3, 7, 11, 15), 128 experts of which 4 (+1 shared) per token:
    # ~1.7 G parameters (1.8 GB at Q8_0), ~0.19 G read per token (11%), as in the real models.
    "small": Shape("hybrid-small", n_embd=1024, n_layer=16, n_head=8, head_dim=128, d_conv=4,
                   kv_lora_rank=512, qk_nope=128, qk_rope=64, v_head=128, n_ff=2816, n_ff_exp=256,
                   n_expert=128, n_expert_used=4, n_expert_shared=1, n_dense_lead=1,
                   expert_weights_scale=2.5, n_ctx_train=131072),
}

WEIGHT_TYPES = {"F32": QT.F32, "F16": QT.F16, "Q8_0": QT.Q8_0, "Q4_1": QT.Q4_1}
FILE_TYPES = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
              "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1}

# Broken files for the loaders' error paths (the engine's and llama.cpp's; docs/hybrid.md records
# what llama.cpp does with each).
BAD_VARIANTS = {
    "missing-tensor": "blk.1.ssm_beta.weight left out",
    "wrong-shape": "blk.3.attn_kv_a_mqa.weight one row short (kv_lora_rank + rope - 1 rows)",
    "head-kv-length": "attention.head_count_kv has n_layer - 1 entries",
    "zero-experts": "expert_count 0 while the layers after the dense one are MoE",
}


def is_mla(il: int) -> bool:
    return il % 4 == 3


class Rng:
    """One generator per tensor, seeded from (seed, tensor name): a tensor's values do not depend
    on which other tensors exist or on the order they are made in."""

    def __init__(self, seed: int):
        self.seed = seed

    def __call__(self, name: str) -> np.random.Generator:
        h = hashlib.sha256(f"{self.seed}:{name}".encode()).digest()
        return np.random.default_rng(int.from_bytes(h[:8], "little"))


# A planned tensor: name, numpy shape (ggml's ne reversed) and the function that makes its values.
Planned = tuple[str, tuple[int, ...], Callable[[], np.ndarray]]


def plan_tensors(s: Shape, seed: int, vocab: int = 49152) -> list[Planned]:
    """Every tensor of the file, in file order, as float32 makers. Scales keep the residual stream
    near unit RMS through every layer (docs/hybrid.md)."""
    rng = Rng(seed)
    out: list[Planned] = []

    def f32(x) -> np.ndarray:
        return np.asarray(x, dtype=np.float32)

    def normal(name, shape, std):
        out.append((name, shape, lambda: f32(rng(name).standard_normal(shape) * std)))

    def linear(name, n_out, n_in, gain=1.0):          # y = W x, W stored (n_out, n_in)
        normal(name, (n_out, n_in), gain / math.sqrt(n_in))

    def norm(name, n):
        out.append((name, (n,), lambda: f32(1.0 + 0.1 * rng(name).standard_normal(n))))

    def conv_taps(name, d_inner):
        # Causal depthwise conv taps, ggml ne [d_conv, 1, d_inner], oldest first: a strong tap on
        # the current token plus small ones on the d_conv-1 previous tokens.
        def make():
            taps = 0.3 * rng(name).standard_normal((d_inner, s.d_conv))
            taps[:, -1] += 1.0
            return f32(taps.reshape(d_inner, 1, s.d_conv))
        out.append((name, (d_inner, 1, s.d_conv), make))

    # Transcendentals through Python's math, not numpy's SIMD paths, so the bytes and the recorded
    # SHA-256 are the same on AVX2 and AVX-512 hosts.
    def dt_bias(name, n):
        # dt = softplus(dt_bias) log-uniform in [1e-3, 1e-1] (FLA's initialisation).
        def make():
            log_dt = rng(name).uniform(math.log(1e-3), math.log(1e-1), n)
            return f32([math.log(math.expm1(math.exp(x))) for x in log_dt])
        out.append((name, (n,), make))

    def a_param(name, n):
        # A = -exp(A_log), A_log ~ U[0, ln 16]; llama.cpp's converter stores A itself, ne [1, H].
        def make():
            a_log = rng(name).uniform(0.0, math.log(16.0), n)
            return f32([-math.exp(x) for x in a_log]).reshape(n, 1)
        out.append((name, (n, 1), make))

    d_inner = s.n_head * s.head_dim
    damp = 1.0 / math.sqrt(2 * s.n_layer)   # sub-layer outputs damped so the residual grows slowly
    normal("token_embd.weight", (vocab, s.n_embd), 1.0)
    for il in range(s.n_layer):
        p = f"blk.{il}."
        norm(p + "attn_norm.weight", s.n_embd)
        if not is_mla(il):
            for x in "qkv":
                linear(p + f"attn_{x}.weight", d_inner, s.n_embd)
                conv_taps(p + f"ssm_conv1d_{x}.weight", d_inner)
            # Forget gate g = A * softplus(f_b(f_a(x)) + dt_bias): per-channel decay exp(g) mostly
            # near 1 (long memory), some channels fast (tests/oracle/test_hybrid_reference.py).
            linear(p + "ssm_f_a.weight", s.head_dim, s.n_embd)
            linear(p + "ssm_f_b.weight", d_inner, s.head_dim, gain=0.3)
            dt_bias(p + "ssm_dt.bias", d_inner)
            a_param(p + "ssm_a", s.n_head)
            linear(p + "ssm_beta.weight", s.n_head, s.n_embd)
            linear(p + "ssm_g_a.weight", s.head_dim, s.n_embd)
            linear(p + "ssm_g_b.weight", d_inner, s.head_dim)
            norm(p + "ssm_norm.weight", s.head_dim)
            linear(p + "attn_output.weight", s.n_embd, d_inner, gain=damp * 2.0)
        else:
            k_mla = s.qk_nope + s.qk_rope
            linear(p + "attn_q.weight", s.n_head * k_mla, s.n_embd)
            linear(p + "attn_kv_a_mqa.weight", s.kv_lora_rank + s.qk_rope, s.n_embd)
            norm(p + "attn_kv_a_norm.weight", s.kv_lora_rank)
            # ggml ne [qk_nope, kv_lora_rank, n_head] and [kv_lora_rank, v_head, n_head]: the
            # absorbed-form halves of kv_b, as llama.cpp's converter splits them.
            normal(p + "attn_k_b.weight", (s.n_head, s.kv_lora_rank, s.qk_nope), 1.0 / math.sqrt(s.kv_lora_rank))
            normal(p + "attn_v_b.weight", (s.n_head, s.v_head, s.kv_lora_rank), 1.0 / math.sqrt(s.kv_lora_rank))
            linear(p + "attn_output.weight", s.n_embd, s.n_head * s.v_head, gain=damp * 2.0)
        norm(p + "ffn_norm.weight", s.n_embd)
        if il < s.n_dense_lead:
            linear(p + "ffn_gate.weight", s.n_ff, s.n_embd)
            linear(p + "ffn_up.weight", s.n_ff, s.n_embd)
            linear(p + "ffn_down.weight", s.n_embd, s.n_ff, gain=damp)
        else:
            linear(p + "ffn_gate_inp.weight", s.n_expert, s.n_embd, gain=2.0)
            # Selection bias spread wide enough that top-k choices rarely sit on a near-tie.
            bname = p + "exp_probs_b.bias"
            out.append((bname, (s.n_expert,), lambda b=bname: f32(rng(b).uniform(-0.5, 0.5, s.n_expert))))
            e3 = (s.n_expert, s.n_ff_exp, s.n_embd)
            normal(p + "ffn_gate_exps.weight", e3, 1.0 / math.sqrt(s.n_embd))
            normal(p + "ffn_up_exps.weight", e3, 1.0 / math.sqrt(s.n_embd))
            normal(p + "ffn_down_exps.weight", (s.n_expert, s.n_embd, s.n_ff_exp), damp / math.sqrt(s.n_ff_exp))
            n_sh = s.n_ff_exp * s.n_expert_shared
            linear(p + "ffn_gate_shexp.weight", n_sh, s.n_embd)
            linear(p + "ffn_up_shexp.weight", n_sh, s.n_embd)
            linear(p + "ffn_down_shexp.weight", s.n_embd, n_sh, gain=damp)
    norm("output_norm.weight", s.n_embd)
    linear("output.weight", vocab, s.n_embd, gain=4.0)   # logits RMS ~4: a peaked distribution
    return out


def tensor_type(name: str, shape: tuple[int, ...], wtype: str) -> QT:
    """llama.cpp's quantizer rules (llama-quant.cpp), plus the exception in the docstring."""
    if len(shape) < 2 or not name.endswith("weight"):
        return QT.F32
    if name.endswith("_norm.weight") or "ffn_gate_inp.weight" in name or "ssm_conv1d" in name:
        return QT.F32
    t = WEIGHT_TYPES[wtype]
    if name == "output.weight" and t == QT.Q4_1:
        t = QT.Q8_0
    block = gguf.GGML_QUANT_SIZES[t][0]
    if shape[-1] % block != 0:   # llama.cpp falls back to a type whose block fits; we keep F32
        return QT.F32
    return t


def encode(arr: np.ndarray, t: QT) -> np.ndarray:
    if t == QT.F32:
        return arr
    if t == QT.F16:
        return arr.astype(np.float16)
    return gguf.quants.quantize(arr, t)


def nbytes(shape: tuple[int, ...], t: QT) -> int:
    if t == QT.F32:
        return 4 * math.prod(shape)
    if t == QT.F16:
        return 2 * math.prod(shape)
    return math.prod(gguf.quants.quant_shape_to_byte_shape(shape, t))


def summary(s: Shape, vocab: int = 49152) -> dict:
    """Parameter counts from the shapes: total, and read per token (the embedding's one row, the
    chosen and shared experts, every other matrix), and the file's bytes per type."""
    plan = plan_tensors(s, 0, vocab)
    total = sum(math.prod(sh) for _, sh, _ in plan)
    active = 0
    for name, sh, _ in plan:
        n = math.prod(sh)
        if name == "token_embd.weight":
            n = s.n_embd
        elif "_exps." in name:
            n = n * s.n_expert_used // s.n_expert
        active += n
    sizes = {t: sum(nbytes(sh, tensor_type(n, sh, t)) for n, sh, _ in plan) for t in WEIGHT_TYPES}
    return {"name": s.name, "params": total, "active_params": active, "active_share": active / total,
            "tensor_bytes": sizes}


def write_model(s: Shape, wtype: str, seed: int, tokenizer_src: Path | None, path: Path,
                vocab: int = 49152, bad: str | None = None) -> None:
    """tokenizer_src None (the fuzzer's seeds): a stand-in vocabulary of `vocab` single tokens.
    bad: one of BAD_VARIANTS, a file that must be refused."""
    if bad is not None and bad not in BAD_VARIANTS:
        raise ValueError(f"unknown bad variant {bad!r}")
    w = gguf.GGUFWriter(str(path), ARCH)
    w.add_name(f"{s.name} (synthetic, seed {seed})")
    w.add_file_type(FILE_TYPES[wtype])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(s.n_ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    head_kv = [1 if is_mla(il) else 0 for il in range(s.n_layer)]
    w.add_head_count_kv(head_kv[:-1] if bad == "head-kv-length" else head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_ssm_conv_kernel(s.d_conv)
    w.add_kda_head_dim(s.head_dim)
    w.add_kv_lora_rank(s.kv_lora_rank)
    w.add_rope_dimension_count(s.qk_rope)
    w.add_key_length(s.kv_lora_rank + s.qk_rope)
    w.add_value_length(s.kv_lora_rank)
    w.add_key_length_mla(s.qk_nope + s.qk_rope)
    w.add_value_length_mla(s.v_head)
    w.add_expert_count(0 if bad == "zero-experts" else s.n_expert)
    w.add_expert_used_count(s.n_expert_used)
    w.add_expert_shared_count(s.n_expert_shared)
    w.add_expert_feed_forward_length(s.n_ff_exp)
    w.add_leading_dense_block_count(s.n_dense_lead)
    w.add_expert_weights_scale(s.expert_weights_scale)
    w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if tokenizer_src is not None:
        copy_tokenizer(w, tokenizer_src)
    else:
        w.add_tokenizer_model("gpt2")
        w.add_token_list([f"t{i}" for i in range(vocab)])
        w.add_token_merges(["t 1"])

    plan = plan_tensors(s, seed, vocab)
    if bad == "missing-tensor":
        plan = [x for x in plan if x[0] != "blk.1.ssm_beta.weight"]
    elif bad == "wrong-shape":
        name = "blk.3.attn_kv_a_mqa.weight"
        plan = [(n, (sh[0] - 1,) + sh[1:], (lambda f=f: f()[:-1])) if n == name else (n, sh, f)
                for n, sh, f in plan]
    types = [tensor_type(n, sh, wtype) for n, sh, _ in plan]
    for (name, sh, _), t in zip(plan, types):
        if t in (QT.F32, QT.F16):
            w.add_tensor_info(name, sh, np.dtype(np.float32 if t == QT.F32 else np.float16), nbytes(sh, t))
        else:
            w.add_tensor_info(name, gguf.quants.quant_shape_to_byte_shape(sh, t), np.dtype(np.uint8),
                              nbytes(sh, t), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for (name, sh, make), t in zip(plan, types):
        arr = make()
        assert arr.shape == sh, (name, arr.shape, sh)
        w.write_tensor_data(encode(arr, t))
    w.close()


@functools.lru_cache(maxsize=4)
def tokenizer_keys(src: Path) -> tuple:
    """Every tokenizer.* key (vocabulary, merges, special ids, chat template) of a GGUF, read once per
    process (gguf-py takes seconds over the 49k-token vocabulary)."""
    r = gguf.GGUFReader(str(src))
    out = []
    for key, field in r.fields.items():
        if key.startswith("tokenizer."):
            vt = field.types[0]
            out.append((key, field.contents(), vt, field.types[1] if vt == gguf.GGUFValueType.ARRAY else None))
    return tuple(out)


def copy_tokenizer(w: gguf.GGUFWriter, src: Path) -> None:
    for key, value, vt, sub in tokenizer_keys(src):
        w.add_key_value(key, value, vt, sub_type=sub)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--types", default="F32,Q8_0", help="comma-separated: " + ",".join(WEIGHT_TYPES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokenizer", default="models/SmolLM2-135M-Instruct.Q4_1.gguf",
                    help="GGUF whose tokenizer.* keys are copied (default: the SmolLM2 model)")
    ap.add_argument("--out", default="models")
    ap.add_argument("--bad", help="comma-separated; write broken files (named hybrid-SIZE.TYPE.bad-VARIANT.gguf): "
                         + "; ".join(f"{k}: {v}" for k, v in BAD_VARIANTS.items()))
    ap.add_argument("--summary", action="store_true", help="print the size's parameter counts and bytes, write nothing")
    a = ap.parse_args(argv)
    shape = SHAPES[a.size]
    if a.summary:
        sm = summary(shape)
        print(f"{sm['name']}: {sm['params'] / 1e6:.1f} M parameters, {sm['active_params'] / 1e6:.1f} M read per token "
              f"({100 * sm['active_share']:.1f}%); tensor bytes "
              + ", ".join(f"{t} {b / 1e6:.1f} MB" for t, b in sm["tensor_bytes"].items()))
        return 0
    types = [t.strip() for t in a.types.split(",") if t.strip()]
    bad = [t for t in types if t not in WEIGHT_TYPES]
    if bad or not types:
        print(f"make_hybrid_model: unknown --types {','.join(bad) or '(empty)'}; choose from {','.join(WEIGHT_TYPES)}",
              file=sys.stderr)
        return 2
    bads = [b.strip() for b in (a.bad or "").split(",") if b.strip()]
    unknown = [b for b in bads if b not in BAD_VARIANTS]
    if unknown:
        print(f"make_hybrid_model: unknown --bad {','.join(unknown)}; choose from {','.join(BAD_VARIANTS)}", file=sys.stderr)
        return 2
    src = Path(a.tokenizer)
    if not src.is_file():
        print(f"make_hybrid_model: tokenizer source {src} not found (run scripts/setup.sh first)", file=sys.stderr)
        return 2
    Path(a.out).mkdir(parents=True, exist_ok=True)
    for t, bad in [(t, b) for t in types for b in (bads or [None])]:
        suffix = f".bad-{bad}" if bad else ""
        path = Path(a.out) / f"{shape.name}.{t}{suffix}.gguf"
        tmp = path.with_suffix(".gguf.tmp")
        write_model(shape, t, a.seed, src, tmp, bad=bad)
        tmp.replace(path)
        print(f"make_hybrid_model: wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
