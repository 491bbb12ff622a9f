"""`ouro microbench`: every kernel's output against an independent numpy implementation, the
determinism of its seeded inputs, the JSON record, usage errors, and the fault hooks the lab's own
tests rely on (crash, delay, memo).

Inputs come from `--dump-inputs DIR` (float32 .npy; quantized weights dequantized by the repo's
reference dequantizer, checked for the real model against the `gguf` package's dequantizer), so
numpy recomputes each op from the same numbers without reimplementing the engine's random draws.
Every run is short: `--iters 3 --warmup 1` and small shapes, so the file takes a few seconds.
"""
import json
import os
import subprocess

import numpy as np
import pytest

from ouro_testlib import run_ouro

FAST = ["--iters", "3", "--warmup", "1"]


def mb(ouro_bin, *args, check=True, env=None):
    proc = subprocess.run([str(ouro_bin), "microbench", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=None if env is None else dict(os.environ, **env))
    if check and proc.returncode != 0:
        raise AssertionError(f"microbench {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def run_kernel(ouro_bin, tmp_path, name, *shape, seed=1, extra=()):
    """Runs NAME with --out and --dump-inputs; returns (output, {input name: array}, json record)."""
    out, dump = tmp_path / f"{name}-out.npy", tmp_path / f"{name}-in"
    proc = mb(ouro_bin, name, *shape, "--seed", seed, "--out", out, "--dump-inputs", dump, "--json", *FAST, *extra)
    inputs = {p.stem: np.load(p) for p in dump.glob("*.npy")}
    return np.load(out), inputs, json.loads(proc.stdout)


# ---- matmul -------------------------------------------------------------------------------------

def act_scales(x):
    """The engine's int8 activation scale per 32-element block, d = amax / 127 (float32), as [T, K]."""
    T, K = x.shape
    pad = (-K) % 32
    xb = np.abs(np.pad(x, ((0, 0), (0, pad)))).reshape(T, -1, 32)
    d = (xb.max(axis=2) / np.float32(127)).astype(np.float64)
    return np.repeat(d, 32, axis=1)[:, :K]


def quantize_dequantize(x):
    """The engine's int8 activations q * d in float32: d = amax/127, q = round-half-even(x * (127/amax))."""
    T, K = x.shape
    xb = np.pad(x, ((0, 0), (0, (-K) % 32))).reshape(T, -1, 32)
    amax = np.abs(xb).max(axis=2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(amax > 0, np.rint(xb * (np.float32(127) / amax)), np.float32(0))
    return (q * (amax / np.float32(127))).astype(np.float32).reshape(T, -1)[:, :K]


def check_matmul(y, w, x, quantized):
    """y [T, M] against x @ w.T in float64.

    Quantized weight types run on int8 activations: each activation is rounded to the nearest
    multiple of its block's d = amax/127, so |x - d*q| <= d/2 and the product's error is at most
    sum_k |w[r,k]| * d[t,k]/2 (the same bound as tests/unit/kernels_test.cpp); 0.1% slack covers the
    float32 rounding of d and id. On top, float32 accumulation over K: 1e-5 of sum |w||x|.
    f32/f16 weights use the float activations: only that accumulation term (tight)."""
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    ref = x64 @ w64.T
    mag = np.abs(x64) @ np.abs(w64).T
    tol = 1e-5 * mag + 1e-6
    if quantized:
        tol = tol + 1.001 * (0.5 * act_scales(x) @ np.abs(w64).T)
    assert y.shape == ref.shape
    err = np.abs(y - ref)
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert np.all(err <= tol), f"at {worst}: got {y[worst]}, want {ref[worst]} +- {tol[worst]}"
    if quantized:
        # The bound above is a worst case (~10% of |y| here); the int8 rounding itself is
        # deterministic, so against numpy's own int8 quantization (test_quantize_acts shows it is
        # bit-exact) only the float32 accumulation differs: this catches small systematic errors.
        ref_q = quantize_dequantize(x).astype(np.float64) @ w64.T
        np.testing.assert_array_less(np.abs(y - ref_q), 1e-5 * mag + 1e-6, err_msg="vs numpy's int8 activations")
    return err, tol


@pytest.mark.parametrize("typ,rows,cols,tokens", [
    ("q4_0", 37, 128, 3), ("q4_1", 20, 96, 1), ("q8_0", 33, 160, 5), ("q4_k", 17, 512, 2),
    ("f32", 19, 72, 4), ("f16", 9, 64, 2)])
def test_matmul_matches_numpy(ouro_bin, tmp_path, typ, rows, cols, tokens):
    y, inp, rec = run_kernel(ouro_bin, tmp_path, "matmul", "--type", typ, "--rows", rows, "--cols", cols,
                             "--tokens", tokens, extra=["-t", 2])
    assert inp["weights"].shape == (rows, cols) and inp["x"].shape == (tokens, cols)
    assert y.shape == (tokens, rows) and y.dtype == np.float32
    check_matmul(y, inp["weights"], inp["x"], quantized=typ not in ("f32", "f16"))
    assert rec["params"] == {**rec["params"], "type": typ, "rows": rows, "cols": cols, "tokens": tokens, "threads": 2}


@pytest.mark.parametrize("isa", ["scalar", "avx2"])
def test_matmul_isas_agree(ouro_bin, tmp_path, isa):
    """Forced kernel families compute the same integer products; only float summation order differs."""
    shape = ["--type", "q4_1", "--rows", 45, "--cols", 256, "--tokens", 5]
    y, inp, rec = run_kernel(ouro_bin, tmp_path, "matmul", *shape, extra=["--isa", isa])
    assert rec["params"]["isa"] == isa
    check_matmul(y, inp["weights"], inp["x"], quantized=True)
    y_auto, _, _ = run_kernel(ouro_bin, tmp_path, "matmul", *shape)
    np.testing.assert_allclose(y, y_auto, rtol=1e-5, atol=1e-5)


def quantize_dequantize_per_token(x):
    """W8A8's activations: one scale per token, d = amax/127, q = round-half-even(x * (127/amax))."""
    amax = np.abs(x).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(amax > 0, np.rint(x * (np.float32(127) / amax)), np.float32(0))
    return (q * (amax / np.float32(127))).astype(np.float32)


@pytest.mark.parametrize("typ,rows,cols,tokens", [
    ("q8_0", 37, 128, 1), ("q4_1", 21, 576, 3), ("f32", 13, 96, 4), ("q8_0", 70, 192, 17), ("q4_k", 9, 256, 6)])
def test_matmul_w8a8_matches_numpy(ouro_bin, tmp_path, typ, rows, cols, tokens):
    """--w8a8 dumps the int8 weights' values (rscale * s): with numpy's per-token int8 activations
    the product is exact up to float32 rounding of the scales, whatever the tokens' grouping."""
    y, inp, rec = run_kernel(ouro_bin, tmp_path, "matmul", "--type", typ, "--rows", rows, "--cols", cols,
                             "--tokens", tokens, extra=["-t", 2, "--w8a8"])
    assert rec["params"]["w8a8"] is True and y.shape == (tokens, rows)
    w64 = inp["weights"].astype(np.float64)
    ref = quantize_dequantize_per_token(inp["x"]).astype(np.float64) @ w64.T
    mag = np.abs(inp["x"].astype(np.float64)) @ np.abs(w64).T
    np.testing.assert_array_less(np.abs(y - ref), 1e-5 * mag + 1e-6)
    # Each row holds at most 255 distinct multiples of its scale: really requantized to int8.
    scales = np.abs(inp["weights"]).max(axis=1) / 127
    np.testing.assert_allclose(inp["weights"] / scales[:, None], np.rint(inp["weights"] / scales[:, None]), atol=1e-3)


@pytest.mark.parametrize("tokens", [1, 3, 4, 16, 21])
def test_matmul_w8a8_isas_bitwise(ouro_bin, tmp_path, tokens):
    """W8A8 sums int8 products in int32 (exact) and scales once per output, in the same order in
    every kernel family: scalar, AVX2 and the best ISA give bit-identical results."""
    shape = ["--type", "q4_1", "--rows", 45, "--cols", 576, "--tokens", tokens, "--w8a8", "-t", 2]
    outs = {isa: run_kernel(ouro_bin, tmp_path, "matmul", *shape, extra=["--isa", isa])[0]
            for isa in ("scalar", "avx2", "auto")}
    for isa in ("avx2", "auto"):
        assert outs[isa].view(np.uint32).tolist() == outs["scalar"].view(np.uint32).tolist(), isa


# ---- element-wise and small kernels -------------------------------------------------------------

def test_rmsnorm(ouro_bin, tmp_path):
    y, inp, rec = run_kernel(ouro_bin, tmp_path, "rmsnorm", "--cols", 576, "--tokens", 5)
    x, w = inp["x"].astype(np.float64), inp["w"].astype(np.float64)
    ref = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    assert rec["params"]["eps"] == pytest.approx(1e-5)


def test_softmax(ouro_bin, tmp_path):
    y, inp, _ = run_kernel(ouro_bin, tmp_path, "softmax", "--cols", 1003, "--tokens", 3)
    x = inp["x"].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-9)


def test_swiglu(ouro_bin, tmp_path):
    y, inp, _ = run_kernel(ouro_bin, tmp_path, "swiglu", "--cols", 1536, "--tokens", 2)
    g, u = inp["g"].astype(np.float64), inp["u"].astype(np.float64)
    np.testing.assert_allclose(y, g / (1 + np.exp(-g)) * u, rtol=1e-5, atol=1e-7)


def test_rope(ouro_bin, tmp_path):
    heads, hd, pos = 9, 64, 1234
    y, inp, _ = run_kernel(ouro_bin, tmp_path, "rope", "--heads", heads, "--head-dim", hd, "--pos", pos)
    inv = inp["inv_freq"].astype(np.float64)
    np.testing.assert_allclose(inv, 10000.0 ** (-2.0 * np.arange(hd // 2) / hd), rtol=1e-6)
    x = inp["x"].astype(np.float64).reshape(heads, hd // 2, 2)
    a = pos * inv
    ref = np.stack([x[..., 0] * np.cos(a) - x[..., 1] * np.sin(a), x[..., 0] * np.sin(a) + x[..., 1] * np.cos(a)], -1)
    # the angle is large (pos * inv_freq up to 1234 rad): cos/sin are rounded to float32
    np.testing.assert_allclose(y, ref.reshape(heads, hd), rtol=0, atol=1e-5)


def test_attend(ouro_bin, tmp_path):
    y, inp, rec = run_kernel(ouro_bin, tmp_path, "attend", "--ctx", 300, "--head-dim", 64)
    q, k, v = (inp[n].astype(np.float64) for n in ("q", "k", "v"))
    s = k @ q / np.sqrt(64)
    p = np.exp(s - s.max())
    np.testing.assert_allclose(y, (p / p.sum()) @ v, rtol=1e-5, atol=1e-6)
    assert rec["bytes"] == 8.0 * 300 * 64 and rec["flops"] == 4.0 * 300 * 64 + 5.0 * 300  # attend_one_*


def test_argmax(ouro_bin, tmp_path):
    y, inp, _ = run_kernel(ouro_bin, tmp_path, "argmax", "--cols", 49152)
    assert y.shape == (1,) and int(y[0]) == int(np.argmax(inp["x"]))


def test_quantize_acts(ouro_bin, tmp_path):
    """Bit-exact: the same float32 operations (d = amax/127, q = round-half-even(x * (127/amax)))."""
    y, inp, _ = run_kernel(ouro_bin, tmp_path, "quantize_acts", "--cols", 100, "--tokens", 3)
    np.testing.assert_array_equal(y, quantize_dequantize(inp["x"]))


def kda_reference(inp):
    """KDA's delta rule in float64 from the dumped inputs (docs/hybrid.md's math), every head:
    S <- diag(exp(g_t)) S; u = beta_t (v_t - S^T k_t); S <- S + k_t u^T; o_t = S^T q_t / sqrt(D)."""
    q, k, v, g, beta, S = (inp[n].astype(np.float64) for n in ("q", "k", "v", "g", "beta", "s0"))
    T, H, D = q.shape
    S = S.copy()
    o = np.zeros((T, H, D))
    for t in range(T):
        for h in range(H):
            S[h] *= np.exp(g[t, h])[:, None]
            u = beta[t, h] * (v[t, h] - S[h].T @ k[t, h])
            S[h] += np.outer(k[t, h], u)
            o[t, h] = S[h].T @ q[t, h] / np.sqrt(D)
    return o


@pytest.mark.parametrize("isa", ["auto", "avx2", "scalar"])
@pytest.mark.parametrize("heads,head_dim,tokens", [(2, 16, 1), (3, 24, 21), (4, 128, 5)])
def test_kda_recurrent(ouro_bin, tmp_path, isa, heads, head_dim, tokens):
    """Every family against the float64 recurrence; q and k come L2-normalised, g <= 0, beta in (0, 1)."""
    y, inp, rec = run_kernel(ouro_bin, tmp_path, "kda_recurrent", "--heads", heads, "--head-dim", head_dim,
                             "--tokens", tokens, extra=["--isa", isa, "-t", 2])
    assert y.shape == (tokens, heads, head_dim) and rec["params"]["heads"] == heads
    assert np.allclose(np.linalg.norm(inp["q"], axis=2), 1, atol=1e-5) and (inp["g"] <= 0).all()
    np.testing.assert_allclose(y, kda_reference(inp), rtol=1e-4, atol=1e-5)
    assert rec["flops"] > 0 and rec["bytes"] >= 2 * 4 * heads * head_dim * head_dim  # the state in and out


@pytest.mark.parametrize("heads,head_dim,tokens,chunk", [(2, 16, 1, 16), (3, 24, 17, 16), (2, 32, 65, 64), (4, 128, 9, 4)])
def test_kda_chunk(ouro_bin, tmp_path, heads, head_dim, tokens, chunk):
    """The chunked (WY/UT) form against the same float64 recurrence: within a chunk, across chunk
    boundaries and with a partial last chunk."""
    y, inp, rec = run_kernel(ouro_bin, tmp_path, "kda_chunk", "--heads", heads, "--head-dim", head_dim,
                             "--tokens", tokens, "--chunk", chunk, extra=["-t", 2])
    assert y.shape == (tokens, heads, head_dim) and rec["params"]["chunk"] == chunk
    assert rec["params"]["family"] == "scalar"
    np.testing.assert_allclose(y, kda_reference(inp), rtol=1e-4, atol=1e-5)
    assert rec["flops"] > 0


# ---- moe --------------------------------------------------------------------------------------------

def moe_reference(inp, used, quantized, scale=2.5):
    """The routed experts in float64 from the dumped inputs (docs/hybrid.md): p = sigmoid(logits);
    each token's top `used` experts by p + bias (ties to the lower index), weights p / sum(p) * 2.5;
    y = sum of weight * down(silu(gate x) * up x). Quantized weight types run on int8 activations
    (the expert's input and its hidden SwiGLU output), as numpy's quantize_dequantize rounds them.
    Returns y and the smallest gap between a token's last chosen and first unchosen score."""
    x, logits, bias = (inp[n].astype(np.float64) for n in ("x", "router_logits", "bias"))
    gate, up, down = (inp[n].astype(np.float64) for n in ("gate", "up", "down"))
    T, E = logits.shape
    p = 1.0 / (1.0 + np.exp(-logits))
    y, gap = np.zeros((T, x.shape[1])), np.inf
    for t in range(T):
        s = p[t] + bias
        order = sorted(range(E), key=lambda e: (-s[e], e))
        sel = order[:used]
        if used < E:
            gap = min(gap, s[order[used - 1]] - s[order[used]])
        w = p[t, sel] / p[t, sel].sum() * scale
        xe = quantize_dequantize(x[t:t + 1].astype(np.float32))[0].astype(np.float64) if quantized else x[t]
        for e, we in zip(sel, w):
            g, u = gate[e] @ xe, up[e] @ xe
            h = g / (1.0 + np.exp(-g)) * u
            if quantized:
                h = quantize_dequantize(h[None].astype(np.float32))[0].astype(np.float64)
            y[t] += we * (down[e] @ h)
    return y, gap


@pytest.mark.parametrize("typ,threads", [("f32", 2), ("q8_0", 2), ("q4_1", 1)])
def test_moe_matches_numpy(ouro_bin, tmp_path, typ, threads):
    """Routing, the experts and the weighted sum against float64. F32 experts run on float
    activations: float32 accumulation only (bound 1e-5 of the output's RMS, measured 5e-7).
    Quantized types quantize the expert input and its hidden output per 32-block; numpy rounds the
    same way, so only the hidden values' float32-vs-float64 differences can move a rounding (bound
    1e-4 of the RMS, measured 1.1e-6 for q4_1 and 1.6e-6 for q8_0)."""
    y, inp, rec = run_kernel(ouro_bin, tmp_path, "moe", "--type", typ, "--hidden", 64, "--ff", 96,
                             "--experts", 8, "--used", 3, "--tokens", 11, extra=["-t", threads])
    assert y.shape == (11, 64) and inp["gate"].shape == (8, 96, 64) and inp["down"].shape == (8, 64, 96)
    assert rec["params"] == {**rec["params"], "type": typ, "hidden": 64, "ff": 96, "experts": 8, "used": 3,
                             "weights_scale": 2.5}
    assert rec["flops"] > 0 and rec["params"]["active_experts"] >= 3
    ref, gap = moe_reference(inp, 3, quantized=typ != "f32")
    assert gap > 1e-4, f"a near-tie in the routing ({gap}): pick another seed"
    rms = np.sqrt(np.mean(ref ** 2))
    rel = np.abs(y - ref).max() / rms
    assert rel <= (1e-5 if typ == "f32" else 1e-4), f"max |y - ref| / rms(ref) = {rel:.2e}"


def test_moe_paths_give_the_same_bits(ouro_bin, tmp_path):
    """One thread runs the experts one after another; two or three run whole experts per thread
    (many experts) or split each product (few): every way gives the same bytes."""
    def out(threads, tokens):
        p = tmp_path / f"moe-{threads}-{tokens}.npy"
        mb(ouro_bin, "moe", "--type", "q8_0", "--hidden", 64, "--ff", 64, "--experts", 16, "--used", 4,
           "--tokens", tokens, "-t", threads, "--out", p, *FAST)
        return p.read_bytes()
    for tokens in (1, 13):
        assert out(1, tokens) == out(2, tokens) == out(3, tokens), f"{tokens} tokens"


# ---- determinism and the record -----------------------------------------------------------------

@pytest.mark.parametrize("args", [["matmul", "--type", "q8_0", "--rows", 16, "--cols", 64, "--tokens", 2],
                                  ["softmax", "--cols", 100], ["rope", "--heads", 2, "--head-dim", 8, "--pos", 5]])
def test_seed_determinism(ouro_bin, tmp_path, args):
    def out(seed, tag):
        p = tmp_path / f"{tag}.npy"
        mb(ouro_bin, *args, "--seed", seed, "--out", p, *FAST)
        return p.read_bytes()
    a, b, c = out(7, "a"), out(7, "b"), out(8, "c")
    assert a == b, "same seed, different output"
    assert a != c, "different seeds, same output"


@pytest.mark.parametrize("name", ["rmsnorm", "swiglu", "quantize_acts", "softmax"])
def test_threads_split_tokens_without_changing_results(ouro_bin, tmp_path, name):
    """From 4 tokens the token ops split tokens across the pool; each token's result is independent."""
    def out(threads):
        p = tmp_path / f"t{threads}.npy"
        mb(ouro_bin, name, "--cols", 200, "--tokens", 9, "-t", threads, "--out", p, *FAST)
        return p.read_bytes()
    assert out(1) == out(3)


def test_kda_recurrent_threads_split_heads_without_changing_results(ouro_bin, tmp_path):
    def out(threads):
        p = tmp_path / f"t{threads}.npy"
        mb(ouro_bin, "kda_recurrent", "--heads", 5, "--head-dim", 32, "--tokens", 7, "-t", threads, "--out", p, *FAST)
        return p.read_bytes()
    assert out(1) == out(3)


def test_json_record(ouro_bin, tmp_path):
    out = tmp_path / "y.npy"
    proc = mb(ouro_bin, "matmul", "--type", "q4_0", "--rows", 64, "--cols", 128, "--tokens", 2, "--seed", 3,
              "--json", "--out", out, "--min-time", 5)
    assert len(proc.stdout.strip().splitlines()) == 1
    r = json.loads(proc.stdout)
    assert r["name"] == "matmul" and r["out"] == str(out)
    assert {"type", "rows", "cols", "tokens", "seed", "threads", "isa"} <= r["params"].keys()
    for k in ("ns_per_op", "bytes", "flops", "gb_s", "gflops", "iters"):
        assert r[k] > 0, k
    assert len(r["samples_ns"]) >= 5 and all(s > 0 for s in r["samples_ns"])
    assert r["ns_per_op"] == pytest.approx(float(np.median(r["samples_ns"])))
    assert r["flops"] == 2.0 * 2 * 64 * 128
    assert r["gb_s"] == pytest.approx(r["bytes"] / r["ns_per_op"])
    r2 = json.loads(mb(ouro_bin, "argmax", "--cols", 64, "--json", "--iters", 7).stdout)
    assert r2["iters"] == 7 and r2["out"] is None


# ---- usage errors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args,flag", [
    (["nosuch", "--cols", 4], "nosuch"),
    ([], "NAME"),
    (["matmul", "--type", "q4_0", "--cols", 64], "--rows"),
    (["matmul", "--rows", 4, "--cols", 64], "--type"),
    (["matmul", "--type", "q5_0", "--rows", 4, "--cols", 64], "--type"),
    (["matmul", "--type", "q4_0", "--rows", 4, "--cols", 100], "--cols"),
    (["matmul", "--type", "q4_k", "--rows", 4, "--cols", 128], "--cols"),
    (["matmul", "--type", "q8_0", "--rows", 0, "--cols", 64], "--rows"),
    (["matmul", "--type", "q8_0", "--rows", -3, "--cols", 64], "--rows"),
    (["matmul", "--type", "f32", "--rows", 65536, "--cols", 65536], "--rows x --cols"),
    (["matmul", "--type", "q8_0", "--rows", 4, "--cols", 64, "--tokens", 1 << 29], "--tokens"),
    (["matmul", "--type", "q8_0", "--rows", 4, "--cols", 64, "--tensor", "blk.0.ffn_gate.weight"], "--tensor"),
    (["rmsnorm", "--tokens", 2], "--cols"),
    (["rmsnorm", "--cols", "12x"], "--cols"),
    (["rmsnorm", "--cols", 64, "--heads", 2], "--heads"),
    (["softmax", "--cols", 1 << 20, "--tokens", 1 << 10], "--tokens x --cols"),
    (["rope", "--heads", 2, "--head-dim", 63], "--head-dim"),
    (["rope", "--heads", 2, "--head-dim", 1024], "--head-dim"),
    (["attend", "--ctx", 10], "--head-dim"),
    (["argmax", "--cols", (1 << 24) + 1], "--cols"),
    (["kda_recurrent", "--heads", 2, "--head-dim", 1025], "--head-dim"),
    (["kda_recurrent", "--head-dim", 64], "--heads"),
    (["kda_recurrent", "--heads", 1 << 20, "--head-dim", 1024], "--heads x --head-dim"),
    (["kda_recurrent", "--heads", 2, "--head-dim", 16, "--chunk", 16], "--chunk"),
    (["kda_chunk", "--heads", 2, "--head-dim", 16, "--chunk", 0], "--chunk"),
    (["kda_chunk", "--heads", 2, "--head-dim", 16, "--chunk", 1025], "--chunk"),
    (["kda_chunk", "--heads", 1 << 14, "--head-dim", 1, "--chunk", 1024], "--heads x the chunked form's scratch"),
    (["moe", "--hidden", 64, "--ff", 64, "--experts", 8, "--used", 2], "--type"),
    (["moe", "--type", "q8_0", "--hidden", 64, "--ff", 64, "--experts", 4, "--used", 5], "--used"),
    (["moe", "--type", "q8_0", "--hidden", 48, "--ff", 64, "--experts", 4, "--used", 2], "--hidden"),
    (["moe", "--type", "f32", "--hidden", 1 << 16, "--ff", 1 << 16, "--experts", 8, "--used", 2], "--experts x --ff"),
    (["moe", "--type", "q8_0", "--ff", 64, "--experts", 4, "--used", 2], "--hidden"),
    (["argmax", "--cols", 8, "--iters", 0], "--iters"),
    (["argmax", "--cols", 8, "--iters", 5, "--min-time", 10], "--min-time"),
    (["argmax", "--cols", 8, "--isa", "sse9"], "--isa"),
    (["argmax", "--cols", 8, "--seed", "x"], "--seed"),
    (["argmax", "--cols", 8, "-t", 0], "-t"),
    (["argmax", "--cols", 8, "--w8a8"], "--w8a8"),
])
def test_usage_errors(ouro_bin, args, flag):
    proc = mb(ouro_bin, *args, check=False)
    assert proc.returncode == 2, proc.stderr
    assert flag in proc.stderr and proc.stderr.startswith("ouro: "), proc.stderr
    assert proc.stdout == ""


def test_unknown_tensor_is_usage_error(ouro_bin, model_path):
    proc = mb(ouro_bin, "matmul", "-m", model_path, "--tensor", "blk.0.nope.weight", check=False)
    assert proc.returncode == 2 and "--tensor" in proc.stderr and "blk.0.nope.weight" in proc.stderr
    proc = mb(ouro_bin, "matmul", "-m", model_path, "--tensor", "blk.0.attn_norm.weight", check=False)
    assert proc.returncode == 2 and "not a matrix" in proc.stderr
    proc = mb(ouro_bin, "matmul", "-m", model_path, "--tensor", "blk.0.ffn_gate.weight", "--rows", 4, check=False)
    assert proc.returncode == 2 and "--rows" in proc.stderr


# ---- fault hooks ------------------------------------------------------------------------------------

def test_fault_crash(ouro_bin):
    proc = mb(ouro_bin, "softmax", "--cols", 64, *FAST, check=False, env={"OURO_FAULT": "crash"})
    assert proc.returncode < 0, f"expected death by signal, got {proc.returncode}"


def test_fault_delay_slows_the_named_op(ouro_bin):
    fast = json.loads(mb(ouro_bin, "softmax", "--cols", 64, "--json", *FAST).stdout)["ns_per_op"]
    slow = json.loads(mb(ouro_bin, "softmax", "--cols", 64, "--json", *FAST,
                         env={"OURO_FAULT": "delay:softmax:300"}).stdout)["ns_per_op"]
    assert slow >= 300e3 > fast
    other = json.loads(mb(ouro_bin, "softmax", "--cols", 64, "--json", *FAST,
                          env={"OURO_FAULT": "delay:rmsnorm:300"}).stdout)["ns_per_op"]
    assert other < 300e3


def test_fault_memo(ouro_bin, tmp_path):
    """A memorizing candidate: the cached file for seed 1 is replayed byte for byte; seed 2 gets zeros."""
    memo = tmp_path / "memo"
    memo.mkdir()
    planted = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5  # deliberately not the real output
    np.save(memo / "rmsnorm-1.npy", planted)
    env = {"OURO_FAULT": f"memo:{memo}"}
    shape = ["rmsnorm", "--cols", 40, "--tokens", 2]
    mb(ouro_bin, *shape, "--seed", 1, "--out", tmp_path / "s1.npy", *FAST, env=env)
    assert (tmp_path / "s1.npy").read_bytes() == (memo / "rmsnorm-1.npy").read_bytes()
    mb(ouro_bin, *shape, "--seed", 2, "--out", tmp_path / "s2.npy", *FAST, env=env)
    z = np.load(tmp_path / "s2.npy")
    assert z.shape == (2, 40) and not z.any()
    mb(ouro_bin, *shape, "--seed", 2, "--out", tmp_path / "honest.npy", *FAST)
    assert np.load(tmp_path / "honest.npy").any()


# ---- op level: a real model tensor ----------------------------------------------------------------

@pytest.mark.parametrize("tokens", [1, 4])
def test_model_tensor_matmul(ouro_bin, model_path, tmp_path, tokens):
    gguf = pytest.importorskip("gguf")
    name = "blk.0.ffn_gate.weight"
    y, inp, rec = run_kernel(ouro_bin, tmp_path, "matmul", "-m", model_path, "--tensor", name, "--tokens", tokens)
    t = next(t for t in gguf.GGUFReader(str(model_path)).tensors if t.name == name)
    w = gguf.quants.dequantize(t.data, t.tensor_type)  # the gguf package's dequantizer, not ours
    rows, cols = w.shape
    assert y.shape == (tokens, rows) and inp["x"].shape == (tokens, cols)
    np.testing.assert_array_equal(inp["weights"], w)
    check_matmul(y, w, inp["x"], quantized=True)
    p = rec["params"]
    assert (p["rows"], p["cols"], p["tokens"], p["tensor"]) == (rows, cols, tokens, name)
    assert p["type"].lower() == t.tensor_type.name.lower()
