"""An independent float64 numpy forward of llama.cpp's `kimi-linear` architecture (KDA + MLA + MoE).

Written from the model's math (docs/hybrid.md), not from any engine's code: it reads the GGUF with
gguf-py, dequantizes every tensor to float64 and runs each layer over the whole token block, with
the KDA recurrence stepped token by token (the recurrent form) and MLA in its naive (decompressing)
form, so it shares nothing with an engine's kernels, chunking or batching.

    ref = HybridRef("models/hybrid-tiny.F32.gguf")
    st = ref.new_state()
    logits = ref.forward(ids[:700], st)           # (700, n_vocab); st carries every memory
    logits = ref.forward(ids[700:], st)           # continues where the first call stopped

`forward(..., trace=Trace())` also records the residual stream after each layer, the KDA per-step
decays exp(g) and the smallest top-k router margin. `variants` exists only so the tests can show
their bounds reject a plausible wrong implementation (VARIANTS names each); the default is the
model as llama.cpp computes it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import gguf

ARCH = "kimi-linear"


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def l2_norm(x: np.ndarray, eps: float) -> np.ndarray:
    # llama.cpp's ggml_l2_norm: x / max(||x||, eps), eps a floor on the norm (FLA: x / sqrt(sum + eps)).
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), eps)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


@dataclass
class SeqState:
    """One sequence's memory: per KDA layer the last d_conv-1 inputs of the q, k and v convolutions
    and the S matrices; per MLA layer the cached latent rows (normed latent + rope part)."""
    conv: dict = field(default_factory=dict)     # layer -> (3, d_conv-1, H*D)
    S: dict = field(default_factory=dict)        # layer -> (H, D_key, D_value)
    kv: dict = field(default_factory=dict)       # layer -> (n_past, kv_lora + rope)
    n_past: int = 0


@dataclass
class Trace:
    """Filled by forward(): hidden[il] the residual stream after layer il, (T, n_embd) per call
    (concatenated over calls); decay[il] every per-step decay exp(g) of a KDA layer; min_margin the
    smallest gap between the k-th and (k+1)-th expert's selection score."""
    hidden: dict = field(default_factory=dict)
    decay: dict = field(default_factory=dict)
    min_margin: float = math.inf

    def add(self, store: dict, il: int, x: np.ndarray) -> None:
        store[il] = x if il not in store else np.concatenate([store[il], x])


LAZY_ABOVE = 256 << 20   # files with more tensor bytes are dequantized per use, not kept (hybrid-small)


class Tensors:
    """A file's tensors by name, dequantized to float64 in numpy's shape (ggml's ne reversed):
    all kept for small files, made again at each use for large ones, so the 1.7 G-parameter
    hybrid-small runs (slowly) in a few GB."""

    def __init__(self, r: gguf.GGUFReader, keep: bool):
        self.raw = {t.name: t for t in r.tensors}
        self.kept = {} if keep else None

    def __getitem__(self, name: str) -> np.ndarray:
        if self.kept is not None and name in self.kept:
            return self.kept[name]
        t = self.raw[name]
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])
        if self.kept is not None:
            self.kept[name] = a
        return a


VARIANTS = {
    "gate_on_value": "KDA decay applied along the value axis of S instead of the key axis",
    "conv_taps_reversed": "the short convolution's taps applied newest first",
    "router_bias_in_weights": "the selection bias also added to the experts' mixing weights",
    "mla_scale_latent": "MLA scores scaled by 1/sqrt(kv_lora_rank + rope) instead of 1/sqrt(key_length_mla)",
    "no_kda_scale": "KDA output without the 1/sqrt(head_dim) query scale",
    "silu_output_gate": "KDA output gate SiLU instead of sigmoid",
}


class HybridRef:
    def __init__(self, path: str, variants: frozenset = frozenset()):
        unknown = set(variants) - set(VARIANTS)
        if unknown:
            raise ValueError(f"unknown variants {sorted(unknown)}")
        self.variants = frozenset(variants)
        r = gguf.GGUFReader(path)
        arch = r.fields["general.architecture"].contents()
        if arch != ARCH:
            raise ValueError(f"{path}: general.architecture is {arch!r}, not {ARCH}")
        self.t = Tensors(r, keep=sum(int(t.n_bytes) for t in r.tensors) < LAZY_ABOVE)

        def g(key, default=None):
            f = r.fields.get(f"{ARCH}.{key}")
            if f is None:
                if default is None:
                    raise ValueError(f"{path}: key {ARCH}.{key} missing")
                return default
            return f.contents()
        self.n_layer = int(g("block_count"))
        self.n_embd = int(g("embedding_length"))
        self.n_head = int(g("attention.head_count"))
        self.head_kv = [int(x) for x in g("attention.head_count_kv")]
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.d_conv = int(g("ssm.conv_kernel"))
        self.head_dim = int(g("kda.head_dim"))
        self.kv_lora = int(g("attention.kv_lora_rank"))
        self.rope = int(g("rope.dimension_count"))
        self.k_mla = int(g("attention.key_length_mla"))
        self.v_mla = int(g("attention.value_length_mla"))
        self.n_expert = int(g("expert_count"))
        self.n_used = int(g("expert_used_count"))
        self.dense_lead = int(g("leading_dense_block_count", 0))
        self.w_scale = float(g("expert_weights_scale", 1.0))
        self.n_vocab = int(self.t.raw["output.weight"].shape[1])

    def is_kda(self, il: int) -> bool:
        return self.head_kv[il] == 0

    def new_state(self) -> SeqState:
        return SeqState()

    def w(self, il: int, name: str) -> np.ndarray:
        return self.t[f"blk.{il}.{name}"]

    # ---- mixers, over a block of T tokens ---------------------------------------------------
    def conv(self, il: int, j: int, x: np.ndarray, name: str, st: SeqState) -> np.ndarray:
        """Causal depthwise convolution of projection j (0 q, 1 k, 2 v) over the stored window and
        the T new inputs, then SiLU; the window keeps the last d_conv-1 inputs."""
        K = self.d_conv
        win = st.conv.setdefault(il, np.zeros((3, K - 1, x.shape[1])))
        seq = np.concatenate([win[j], x])                                     # (K-1+T, C)
        taps = self.w(il, f"ssm_conv1d_{name}.weight").reshape(-1, K)         # (C, K), oldest first
        if "conv_taps_reversed" in self.variants:
            taps = taps[:, ::-1]
        y = sum(seq[k:k + len(x)] * taps[:, k] for k in range(K))
        win[j] = seq[len(x):]
        return silu(y)

    def kda(self, il: int, a: np.ndarray, st: SeqState, tr: Trace | None) -> np.ndarray:
        H, D, T = self.n_head, self.head_dim, len(a)
        q, k, v = (self.conv(il, j, a @ self.w(il, f"attn_{n}.weight").T, n, st).reshape(T, H, D)
                   for j, n in enumerate("qkv"))
        q, k = l2_norm(q, self.eps), l2_norm(k, self.eps)
        pre = (a @ self.w(il, "ssm_f_a.weight").T) @ self.w(il, "ssm_f_b.weight").T + self.w(il, "ssm_dt.bias")
        g = softplus(pre).reshape(T, H, D) * self.w(il, "ssm_a").reshape(1, H, 1)   # log-decay per key channel
        decay = np.exp(g)
        if tr is not None:
            tr.add(tr.decay, il, decay)
        beta = sigmoid(a @ self.w(il, "ssm_beta.weight").T)                   # (T, H)
        scale = 1.0 if "no_kda_scale" in self.variants else 1.0 / math.sqrt(D)
        S = st.S.setdefault(il, np.zeros((H, D, D)))                           # S[h, key, value]
        o = np.empty((T, H, D))
        for t in range(T):
            S *= decay[t][:, None, :] if "gate_on_value" in self.variants else decay[t][:, :, None]
            pred = np.einsum("hkv,hk->hv", S, k[t])
            S += np.einsum("hk,hv->hkv", k[t], beta[t][:, None] * (v[t] - pred))
            o[t] = np.einsum("hkv,hk->hv", S, q[t]) * scale
        gate_in = (a @ self.w(il, "ssm_g_a.weight").T) @ self.w(il, "ssm_g_b.weight").T
        gate = (silu if "silu_output_gate" in self.variants else sigmoid)(gate_in).reshape(T, H, D)
        o = rms_norm(o, self.w(il, "ssm_norm.weight"), self.eps) * gate
        return o.reshape(T, H * D) @ self.w(il, "attn_output.weight").T

    def mla(self, il: int, a: np.ndarray, st: SeqState) -> np.ndarray:
        H, L, R, T = self.n_head, self.kv_lora, self.rope, len(a)
        nope = self.k_mla - R
        q = (a @ self.w(il, "attn_q.weight").T).reshape(T, H, self.k_mla)
        ckv = a @ self.w(il, "attn_kv_a_mqa.weight").T
        rows = np.concatenate([rms_norm(ckv[:, :L], self.w(il, "attn_kv_a_norm.weight"), self.eps), ckv[:, L:]], axis=1)
        cache = np.concatenate([st.kv[il], rows]) if il in st.kv else rows
        st.kv[il] = cache
        N, past = len(cache), len(cache) - T
        # Naive form: each head's keys [W_kb^h c_j ; k_rope_j] and values W_vb^h c_j, decompressed.
        keys = np.einsum("hln,jl->hjn", self.w(il, "attn_k_b.weight"), cache[:, :L])     # (H, N, nope)
        vals = np.einsum("hvl,jl->hjv", self.w(il, "attn_v_b.weight"), cache[:, :L])     # (H, N, v)
        scores = np.einsum("thn,hjn->htj", q[:, :, :nope], keys) + np.einsum("thr,jr->htj", q[:, :, nope:], cache[:, L:])
        scores /= math.sqrt(L + R if "mla_scale_latent" in self.variants else self.k_mla)
        causal = np.arange(N)[None, :] <= (past + np.arange(T))[:, None]               # (T, N)
        scores = np.where(causal[None], scores, -np.inf)
        p = np.exp(scores - scores.max(axis=2, keepdims=True))
        p /= p.sum(axis=2, keepdims=True)
        o = np.einsum("htj,hjv->thv", p, vals)
        return o.reshape(T, H * self.v_mla) @ self.w(il, "attn_output.weight").T

    # ---- feed-forward -----------------------------------------------------------------------
    def glu(self, x, gate, up, down):
        return (silu(x @ gate.T) * (x @ up.T)) @ down.T

    def ffn(self, il: int, x: np.ndarray, tr: Trace | None) -> np.ndarray:
        w = lambda n: self.w(il, n)
        if il < self.dense_lead:
            return self.glu(x, w("ffn_gate.weight"), w("ffn_up.weight"), w("ffn_down.weight"))
        probs = sigmoid(x @ w("ffn_gate_inp.weight").T)                       # (T, E)
        bias = w("exp_probs_b.bias")
        sel_score = probs + bias                                              # the bias only selects
        order = np.argsort(-sel_score, axis=1, kind="stable")
        chosen = order[:, : self.n_used]
        if tr is not None:
            srt = np.take_along_axis(sel_score, order, axis=1)
            tr.min_margin = min(tr.min_margin, float((srt[:, self.n_used - 1] - srt[:, self.n_used]).min()))
        weights = np.take_along_axis(probs, chosen, axis=1)
        if "router_bias_in_weights" in self.variants:
            weights = weights + bias[chosen]
        weights = weights / np.maximum(weights.sum(axis=1, keepdims=True), 6.103515625e-5) * self.w_scale
        out = self.glu(x, w("ffn_gate_shexp.weight"), w("ffn_up_shexp.weight"), w("ffn_down_shexp.weight"))
        gate, up, down = w("ffn_gate_exps.weight"), w("ffn_up_exps.weight"), w("ffn_down_exps.weight")
        for e in np.unique(chosen):
            rows, slot = np.nonzero(chosen == e)
            y = self.glu(x[rows], gate[e], up[e], down[e])
            out[rows] += weights[rows, slot][:, None] * y
        return out

    # ---- the model ----------------------------------------------------------------------------
    def forward(self, tokens, st: SeqState, trace: Trace | None = None) -> np.ndarray:
        """Logits (len(tokens), n_vocab) in float64; st is updated to follow the tokens."""
        h = self.t["token_embd.weight"][np.asarray(tokens, dtype=np.int64)]
        for il in range(self.n_layer):
            a = rms_norm(h, self.w(il, "attn_norm.weight"), self.eps)
            h = h + (self.kda(il, a, st, trace) if self.is_kda(il) else self.mla(il, a, st))
            h = h + self.ffn(il, rms_norm(h, self.w(il, "ffn_norm.weight"), self.eps), trace)
            if trace is not None:
                trace.add(trace.hidden, il, h.copy())
        st.n_past += len(tokens)
        return rms_norm(h, self.t["output_norm.weight"], self.eps) @ self.t["output.weight"].T


def main(argv=None) -> int:
    """One-off check of any kimi-linear file (hybrid-small included): per-layer activations and
    llama.cpp's logits against the reference's on random token ids. Not used by the tests.
        .venv/bin/python tests/oracle/hybrid_ref.py models/hybrid-small.F32.gguf --tokens 48"""
    import argparse
    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--no-peer", action="store_true", help="skip llama.cpp")
    a = ap.parse_args(argv)
    ref = HybridRef(a.model)
    ids = [int(x) for x in np.random.default_rng(a.seed).integers(3, ref.n_vocab, a.tokens)]
    tr = Trace()
    logits = ref.forward(ids, ref.new_state(), tr)
    print("residual RMS per layer: " + " ".join(f"{il}:{np.sqrt((h ** 2).mean()):.3f}" for il, h in tr.hidden.items()))
    for il, d in tr.decay.items():
        print(f"KDA layer {il} decay exp(g): min {d.min():.3g} p1 {np.percentile(d, 1):.3g} "
              f"median {np.median(d):.3g} max {d.max():.5f}")
    print(f"smallest router margin {tr.min_margin:.2e}; logits RMS {np.sqrt((logits ** 2).mean()):.3f}")
    if not a.no_peer:
        from llama_cpp import Llama
        m = Llama(model_path=a.model, n_ctx=max(64, a.tokens), n_batch=512, logits_all=True, verbose=False,
                  type_k=0, type_v=0)
        m.eval(ids)
        peer = np.array(m.scores[: len(ids)], dtype=np.float64)
        d = peer - logits
        nmse = (d * d).sum(axis=1) / (logits * logits).sum(axis=1)
        print(f"llama.cpp vs reference: max row NMSE {nmse.max():.2e}, max |delta| {np.abs(d).max():.2e}, "
              f"top-1 agreement {(peer.argmax(1) == logits.argmax(1)).mean():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
