"""Logits of small synthetic llama models of every weight type against the numpy reference.

The default model exercises Q4_1, Q8_0 and F32; these files (written by tests/cli/synth.py with
the `gguf` package) cover the loader and matmul paths of F32, F16, Q4_0 BF16 and Q8_0 weights
too, with an untied output matrix (and one tied, as SmolLM2 is)."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cli"))
import reference  # noqa: E402
from blocks import random_blocks  # noqa: E402
from synth import QT, TensorSpec, tiny_llama_plan  # noqa: E402

VARIANTS = {
    "f32": None,
    "f16": QT.F16,
    "q8_0": QT.Q8_0,
    "q4_0": QT.Q4_0,
    "q4_1": QT.Q4_1,
    "bf16": QT.BF16,
    "q8_0_tied": QT.Q8_0,
}


# K-quant types have no quantizer in the gguf package: their tensors are random valid blocks
# (scales chosen so weights stay O(0.1)), which the reference dequantizes with the gguf package.
K_VARIANTS = {"q4_k": (QT.Q4_K, 1e-4), "q6_k": (QT.Q6_K, 2e-5)}


@pytest.mark.parametrize("name", list(K_VARIANTS))
def test_k_quant_model_logits_match_reference(name, ouro_bin, tmp_path):
    qtype, scale = K_VARIANTS[name]
    plan = tiny_llama_plan(n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, seed=5)
    rng = np.random.default_rng(3)
    for tname, ts in list(plan.tensors.items()):
        if ts.data.ndim != 2:
            continue
        rows, cols = ts.data.shape
        raw, block = random_blocks(qtype, rows * cols // 256, rng, scale=scale)
        plan.tensors[tname] = TensorSpec(raw.reshape(rows, -1), raw_dtype=qtype, shape=(rows, cols))
    check_against_reference(plan, name, ouro_bin, tmp_path, bound=1e-3 if qtype == QT.Q4_K else 1e-9)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_synthetic_model_logits_match_reference(name, ouro_bin, tmp_path):
    plan = tiny_llama_plan(n_layer=2, n_embd=128, n_head=4, n_head_kv=2, n_ff=256, seed=11,
                           tied_output=name.endswith("_tied"))
    if VARIANTS[name] is not None:
        plan.quantize(VARIANTS[name])
    check_against_reference(plan, name, ouro_bin, tmp_path,
                            # F32/F16/BF16 (and Q6_K) take the float path, no activation rounding.
                            bound=1e-9 if name in ("f32", "f16", "bf16") else 1e-3)


def check_against_reference(plan, name, ouro_bin, tmp_path, bound):
    path = tmp_path / f"tiny_{name}.gguf"
    plan.write(path)
    ids = [1, 40, 41, 290, 100, 101, 102, 2, 1, 55, 66, 77, 88, 99, 120, 130]
    out = tmp_path / "l.npy"
    subprocess.run([str(ouro_bin), "logits", "-m", str(path), "--tokens", ",".join(map(str, ids)), "--all",
                    "--out", str(out)], check=True, capture_output=True)
    got = np.load(out)
    ref = reference.forward(ids, model_path=path)
    assert got.shape == ref.shape
    nmse = float(((got - ref) ** 2).sum() / (ref ** 2).sum())
    print(f"[{name}] NMSE {nmse:.3e} max|delta| {np.abs(got - ref).max():.4f} |ref|max {np.abs(ref).max():.3f}")
    # The float path agrees to float precision (NMSE ~1e-13 measured). Integer layouts round
    # activations to int8 (relative error ~1/254 per element): NMSE ~1e-4 measured on these
    # random weights; 1e-3 leaves room, and a layout or scale bug gives NMSE of order 1.
    assert nmse <= bound, f"NMSE {nmse:.3e} > {bound}"
