"""Quality of the quantized paths (docs/quantization.md), measured by `ouro quality` on the shipped
evaluation text and held to bounds set from measurements (the figures and margins are in
docs/quantization.md). Each bound must also catch a deliberately broken quantizer: the
OURO_FAULT=badscale fault stores wrong scales, and the same check has to fail.

The metric definitions are checked against numpy: the test recomputes perplexity, KL divergence and
top-1 agreement from the logits that `ouro logits` dumps for both configurations."""
import functools
import json
import os
import subprocess

import numpy as np
import pytest

from ouro_testlib import ROOT

EVAL_TEXT = ROOT / "data" / "eval" / "ouro-eval.txt"
CHUNKS = 2  # 2 chunks of 512 tokens: 510 scored positions (the full text has 41 chunks)

# mode -> (launch flags, bounds). Measured at 4 chunks (2026-12-03, SmolLM2-135M Q4_1):
#   w8a8 KL 0.0327 (p99 0.121), top-1 0.864; bf16 0.0043 / 0.954; int8 0.0054 / 0.941;
#   fp8 0.0113 / 0.923; mixed 0.0056 / 0.945. Bounds leave about 1.5x room on KL.
# The tests run 2 chunks (half the time: each run computes the reference too). Re-measured there
# (2026-12-04, AVX-512 and AVX2 kernels): every honest mode at <= 0.67 of its mean-KL bound and
# <= 0.76 of its p99 bound, top-1 1-5% above its bound; every broken scale at >= 3.7x its mean-KL
# bound (w8a8 3.7x, w8a8_smooth 6.0x, fp8 11.6x, mixed 13.8x, int8 22.7x).
MODES = {
    "w8a8": (["--weights", "w8a8"], {"kl_mean": 0.05, "kl_p99": 0.2, "top1": 0.82, "ln_ppl_ratio": 0.05}),
    # SmoothQuant, alpha 0.5, calibrated on data/eval/calib.txt (not the eval text): KL 0.0181, p99
    # 0.079, top-1 0.895, ln ppl ratio 0.011.
    "w8a8_smooth": (["--weights", "w8a8", "--w8a8-smooth", "0.5"],
                    {"kl_mean": 0.028, "kl_p99": 0.13, "top1": 0.86, "ln_ppl_ratio": 0.025}),
    "kv_bf16": (["--kv", "bf16"], {"kl_mean": 0.008, "kl_p99": 0.03, "top1": 0.93, "ln_ppl_ratio": 0.01}),
    "kv_int8": (["--kv", "int8"], {"kl_mean": 0.009, "kl_p99": 0.035, "top1": 0.92, "ln_ppl_ratio": 0.01}),
    "kv_fp8": (["--kv", "fp8"], {"kl_mean": 0.018, "kl_p99": 0.09, "top1": 0.90, "ln_ppl_ratio": 0.02}),
    "kv_mixed": (["--kv", "k=int8,v=fp8", "--kv-layers", "0-3:bf16"],
                 {"kl_mean": 0.009, "kl_p99": 0.035, "top1": 0.92, "ln_ppl_ratio": 0.01}),
}
# A wrong scale for each family of modes: small enough to look plausible, large enough to matter.
BROKEN = {"w8a8": "badscale:w8a8:1.1", "w8a8_smooth": "badscale:w8a8:1.1", "kv_bf16": None, "kv_int8": "badscale:kv:1.15",
          "kv_fp8": "badscale:kv:1.15", "kv_mixed": "badscale:kv:1.15"}


def quality(ouro_bin, model_path, flags, fault=None, extra=()):
    """`ouro quality --json` on CHUNKS chunks; the same invocation is run once per session (the
    report is deterministic: test_smoothing_helps_w8a8 reads the two runs the bounds tests made)."""
    return json.loads(_quality(str(ouro_bin), str(model_path), tuple(flags), fault, tuple(extra)))


@functools.lru_cache(maxsize=None)
def _quality(ouro_bin, model_path, flags, fault, extra):
    env = dict(os.environ)
    env.pop("OURO_FAULT", None)
    if fault:
        env["OURO_FAULT"] = fault
    proc = subprocess.run([str(ouro_bin), "quality", "-m", str(model_path), "--chunks", str(CHUNKS), "--prompts", "2",
                           "--greedy-len", "16", "--json", *flags, *extra], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def violations(report, bounds):
    """The bounds a report breaks (empty when it passes)."""
    out = []
    if not report["kl_mean"] <= bounds["kl_mean"]:
        out.append(f"mean KL {report['kl_mean']:.5f} > {bounds['kl_mean']}")
    if not report["kl_p99"] <= bounds["kl_p99"]:
        out.append(f"p99 KL {report['kl_p99']:.5f} > {bounds['kl_p99']}")
    if not report["top1_agreement"] >= bounds["top1"]:
        out.append(f"top-1 {report['top1_agreement']:.4f} < {bounds['top1']}")
    if not report["ln_ppl_ratio"] <= bounds["ln_ppl_ratio"]:
        out.append(f"ln(ppl/ppl_ref) {report['ln_ppl_ratio']:.5f} > {bounds['ln_ppl_ratio']}")
    return out


@pytest.mark.parametrize("mode", sorted(MODES))
def test_mode_within_bounds(ouro_bin, model_path, mode):
    flags, bounds = MODES[mode]
    r = quality(ouro_bin, model_path, flags)
    assert r["scored_tokens"] == CHUNKS * 255
    assert r["text_tokens"] >= 20000  # the shipped text is at least 20k tokens
    assert violations(r, bounds) == [], r
    # The quantized configuration differs from the reference at all (the comparison is not vacuous).
    assert r["kl_mean"] > 0


@pytest.mark.parametrize("mode", sorted(m for m in MODES if BROKEN[m]))
def test_broken_quantizer_fails_the_bounds(ouro_bin, model_path, mode):
    flags, bounds = MODES[mode]
    r = quality(ouro_bin, model_path, flags, fault=BROKEN[mode])
    assert violations(r, bounds), f"a wrong scale ({BROKEN[mode]}) passed the {mode} bounds: {r}"


def test_smoothing_helps_w8a8(ouro_bin, model_path):
    """The issue asks whether SmoothQuant-style smoothing helps: measured, it removes about 45% of
    W8A8's mean KL (0.0327 -> 0.0181); hold it to at least 20%."""
    plain = quality(ouro_bin, model_path, MODES["w8a8"][0])
    smooth = quality(ouro_bin, model_path, MODES["w8a8_smooth"][0])
    assert "smooth" in smooth["candidate"]["weights"] and "smooth" not in plain["candidate"]["weights"]
    assert smooth["kl_mean"] < 0.8 * plain["kl_mean"], (plain["kl_mean"], smooth["kl_mean"])
    assert smooth["top1_agreement"] > plain["top1_agreement"]


def test_reference_against_itself_is_exact(ouro_bin, model_path):
    r = quality(ouro_bin, model_path, ["--kv", "f32", "--weights", "native"])
    assert r["kl_mean"] == 0 and r["kl_max"] == 0 and r["top1_agreement"] == 1
    assert r["ppl"] == r["ppl_ref"]
    assert r["greedy"]["identical"] == 1


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def test_metrics_match_numpy(ouro_bin, model_path, tmp_path):
    """One chunk of 64 tokens: recompute every figure from dumped logits with numpy."""
    ctx = 64
    ids = json.loads(subprocess.check_output([str(ouro_bin), "tokenize", "--json", "--no-special",
                                              EVAL_TEXT.read_text()[:4000]], text=True))["ids"][:ctx]
    assert len(ids) == ctx
    text_file = tmp_path / "t.txt"
    # quality tokenizes its text itself: give it exactly these tokens' text.
    pieces = subprocess.check_output([str(ouro_bin), "detokenize", ",".join(map(str, ids))], text=True)
    text_file.write_text(pieces)
    again = json.loads(subprocess.check_output([str(ouro_bin), "tokenize", "--json", "--no-special", pieces], text=True))
    assert again["ids"] == ids  # the text file holds exactly these tokens
    flags = ["--kv", "fp8", "--weights", "w8a8"]
    logits = {}
    for name, f in (("ref", []), ("cand", flags)):
        out = tmp_path / f"{name}.npy"
        subprocess.run([str(ouro_bin), "logits", "-m", str(model_path), "--tokens", ",".join(map(str, ids)), "--all",
                        "--out", str(out), *f], check=True, capture_output=True)
        logits[name] = np.load(out)
    r = json.loads(subprocess.check_output([str(ouro_bin), "quality", "-m", str(model_path), "--text", str(text_file),
                                            "--ctx", str(ctx), "--prompts", "0", "--json", *flags], text=True))
    assert r["text_tokens"] == ctx and r["chunks"] == 1
    first = ctx // 2
    lp = log_softmax(logits["ref"])[first:ctx - 1]
    lq = log_softmax(logits["cand"])[first:ctx - 1]
    kl = (np.exp(lp) * (lp - lq)).sum(axis=1)
    targets = np.array(ids[first + 1:ctx])
    rows = np.arange(len(targets))
    assert r["scored_tokens"] == len(targets)
    assert r["kl_mean"] == pytest.approx(kl.mean(), rel=1e-4, abs=1e-7)
    assert r["kl_p99"] == pytest.approx(np.quantile(kl, 0.99), rel=1e-4, abs=1e-7)
    assert r["kl_max"] == pytest.approx(kl.max(), rel=1e-4, abs=1e-7)
    assert r["top1_agreement"] == pytest.approx((lp.argmax(1) == lq.argmax(1)).mean())
    assert r["ppl"] == pytest.approx(np.exp(-lq[rows, targets].mean()), rel=1e-5)
    assert r["ppl_ref"] == pytest.approx(np.exp(-lp[rows, targets].mean()), rel=1e-5)
