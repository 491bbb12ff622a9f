"""`ouro quality` on the hybrid (kimi-linear, hybrid-tiny): each quantized file against the F32 file
of the same weights (`--ref-model`), and W8A8 and the KV cache types against the F32 file's own
native run, held to bounds set from measurements; a broken scale (OURO_FAULT=badscale) must fail
the same bounds. hybrid-tiny's weights are random and its next-token distributions nearly flat,
so top-1 moves at near-ties even where KL is tiny (KV int8: KL 1e-6, top-1 0.996).

Measured (2 chunks, 2026-12-06, AVX-512): mean KL / top-1 against the F32 file: F16 2.2e-6 / 1.0,
Q8_0 0.041 / 0.908, Q4_1 0.56 / 0.51; on the F32 file: w8a8 0.052 / 0.924 (broken 0.90),
KV int8 1.2e-6 / 0.996 (broken 0.065), fp8 3.5e-3 / 0.984 (broken 0.060), bf16 9.8e-8 / 1.0.
Bounds: about 2-3x the mean KL (100x where it is under 1e-5), top-1 a few points under."""
import pytest

from ouro_testlib import ROOT, run_ouro
from test_quality import quality

TINY = ROOT / "models" / "hybrid-tiny.{}.gguf"
F32 = TINY.parent / "hybrid-tiny.F32.gguf"

# file type -> (max mean KL, min top-1) against the F32 file
FORMATS = {"F16": (1e-4, 0.98), "Q8_0": (0.1, 0.85), "Q4_1": (1.2, 0.4)}
# mode -> (flags, max mean KL, min top-1, the fault that must break it)
MODES = {
    "w8a8": (["--weights", "w8a8"], 0.12, 0.85, "badscale:w8a8:1.1"),
    "kv_int8": (["--kv", "int8"], 1e-4, 0.97, "badscale:kv:1.15"),
    "kv_fp8": (["--kv", "fp8"], 0.01, 0.95, "badscale:kv:1.15"),
    "kv_bf16": (["--kv", "bf16"], 1e-5, 0.98, None),
}


def test_quantized_files_against_the_f32_file(ouro_bin):
    kl = {}
    for wtype, (max_kl, min_top1) in FORMATS.items():
        r = quality(ouro_bin, str(TINY).format(wtype), ["--ref-model", str(F32)])
        assert r["reference"]["model"] == str(F32) and r["scored_tokens"] == 2 * 255
        assert 0 < r["kl_mean"] <= max_kl and r["top1_agreement"] >= min_top1, (wtype, r)
        kl[wtype] = r["kl_mean"]
    # More bits, closer to the F32 weights.
    assert kl["F16"] < kl["Q8_0"] < kl["Q4_1"], kl


@pytest.mark.parametrize("mode", sorted(MODES))
def test_hybrid_mode_within_bounds(ouro_bin, mode):
    flags, max_kl, min_top1, fault = MODES[mode]
    r = quality(ouro_bin, F32, flags)
    assert 0 < r["kl_mean"] <= max_kl and r["top1_agreement"] >= min_top1, r
    if fault:
        broken = quality(ouro_bin, F32, flags, fault=fault)
        assert broken["kl_mean"] > max_kl, f"a wrong scale ({fault}) passed the {mode} bounds: {broken}"


def test_the_f32_file_as_its_own_reference_is_exact(ouro_bin):
    r = quality(ouro_bin, F32, ["--ref-model", str(F32)])
    assert r["kl_max"] == 0 and r["top1_agreement"] == 1 and r["ppl"] == r["ppl_ref"]


def test_ref_model_must_be_the_same_model(ouro_bin, model_path):
    p = run_ouro(ouro_bin, "quality", "-m", F32, "--ref-model", model_path, "--chunks", "1", check=False)
    assert p.returncode == 2 and "flag --ref-model" in p.stderr and "is not the same model" in p.stderr, p.stderr
    p = run_ouro(ouro_bin, "quality", "-m", F32, "--ref-model", ROOT / "models" / "no-such.gguf", "--chunks", "1", check=False)
    assert p.returncode != 0 and "no-such.gguf" in p.stderr, p.stderr
