"""The writer of the hybrid (kimi-linear) files, scripts/make_hybrid_model.py: deterministic, its
files what docs/hybrid.md says (shapes, tensor types, keys, tokenizer), and its broken variants
broken in the way they claim (llama.cpp, run in a child process, names what is wrong)."""
from __future__ import annotations

import os
import subprocess
import sys

import gguf
import numpy as np
import pytest

from hybrid_peer import MODELS, ROOT, TYPES, recorded_sum, sha256, tiny

WRITER = ROOT / "scripts" / "make_hybrid_model.py"
SMOL = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
sys.path.insert(0, str(ROOT / "scripts"))
import make_hybrid_model as writer  # noqa: E402

# Every key llama.cpp's kimi-linear loader reads as required (../shared/design/REFERENCE.md §11 and
# llama.cpp's llama-model.cpp), plus the MoE keys it needs even in an all-dense file.
REQUIRED_KEYS = ["context_length", "embedding_length", "block_count", "feed_forward_length",
                 "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
                 "attention.key_length", "attention.value_length", "attention.key_length_mla",
                 "attention.value_length_mla", "attention.kv_lora_rank", "rope.dimension_count",
                 "ssm.conv_kernel", "kda.head_dim", "leading_dense_block_count", "expert_count",
                 "expert_used_count", "expert_shared_count", "expert_feed_forward_length",
                 "expert_weights_scale", "expert_gating_func"]


def run_writer(*args, check=True):
    return subprocess.run([sys.executable, str(WRITER), *map(str, args)], capture_output=True, text=True,
                          check=check, cwd=ROOT)


def test_writer_is_deterministic_and_matches_recorded_sums(tmp_path):
    run_writer("--size", "tiny", "--types", ",".join(TYPES), "--out", tmp_path)
    for t in TYPES:
        name = tiny(t).name
        assert sha256(tmp_path / name) == recorded_sum(name) == sha256(tiny(t)), name
    run_writer("--size", "tiny", "--types", "Q8_0", "--seed", "2", "--out", tmp_path / "s2")
    assert sha256(tmp_path / "s2" / tiny("Q8_0").name) != recorded_sum(tiny("Q8_0").name)


def test_writer_rejects_bad_arguments(tmp_path):
    r = run_writer("--types", "Q5_K", "--out", tmp_path, check=False)
    assert r.returncode == 2 and "unknown --types Q5_K" in r.stderr
    r = run_writer("--tokenizer", tmp_path / "none.gguf", "--out", tmp_path, check=False)
    assert r.returncode == 2 and "not found" in r.stderr
    r = run_writer("--bad", "no-such-thing", "--out", tmp_path, check=False)
    assert r.returncode == 2 and "unknown --bad no-such-thing" in r.stderr
    assert not list(tmp_path.glob("*.gguf"))


def test_sizes_as_the_issue_asks():
    tiny_shape, small = writer.SHAPES["tiny"], writer.SHAPES["small"]
    mla = [il for il in range(tiny_shape.n_layer) if writer.is_mla(il)]
    assert tiny_shape.n_layer >= 8 and mla == [3, 7] and tiny_shape.n_expert >= 4
    assert tiny("F32").stat().st_size < 40_000_000
    s = writer.summary(small)
    assert small.head_dim == 128 and small.n_layer % 4 == 0
    assert s["tensor_bytes"]["Q8_0"] >= 1 << 30                  # no cache holds it
    assert 0.07 <= s["active_share"] <= 0.15, s["active_share"]  # about a tenth read per token


@pytest.mark.parametrize("wtype", TYPES)
def test_file_reads_back_with_every_required_key(wtype):
    r = gguf.GGUFReader(str(tiny(wtype)))
    f = {k: v.contents() for k, v in r.fields.items()}
    assert f["general.architecture"] == "kimi-linear"
    missing = [k for k in REQUIRED_KEYS if f"kimi-linear.{k}" not in f]
    assert not missing, missing
    assert list(f["kimi-linear.attention.head_count_kv"]) == [0, 0, 0, 1, 0, 0, 0, 1]
    assert f["kimi-linear.expert_gating_func"] == 2          # sigmoid
    assert f["kimi-linear.attention.key_length"] == f["kimi-linear.attention.kv_lora_rank"] + f["kimi-linear.rope.dimension_count"]
    # The SmolLM2 tokenizer and chat template, key for key.
    tok = {k: v for k, v, _, _ in writer.tokenizer_keys(SMOL)}       # read once per process
    assert tok and all(f[k] == v for k, v in tok.items())
    assert "im_start" in f["tokenizer.chat_template"]
    # Tensor types by llama.cpp's quantizer rules.
    kinds = {t.name: t.tensor_type.name for t in r.tensors}
    want = {"F32": "F32", "F16": "F16", "Q8_0": "Q8_0", "Q4_1": "Q4_1"}[wtype]
    for name in ("blk.0.ffn_gate.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_shexp.weight",
                 "blk.0.attn_q.weight", "blk.0.ssm_f_b.weight", "blk.3.attn_k_b.weight", "token_embd.weight"):
        assert kinds[name] == want, (name, kinds[name])
    assert kinds["output.weight"] == ("Q8_0" if wtype == "Q4_1" else want)
    for name in ("blk.1.ffn_gate_inp.weight", "blk.0.ssm_conv1d_q.weight", "blk.0.ssm_norm.weight",
                 "blk.0.ssm_a", "blk.0.ssm_dt.bias", "blk.1.exp_probs_b.bias", "blk.3.attn_kv_a_norm.weight",
                 "output_norm.weight"):
        assert kinds[name] == "F32", (name, kinds[name])
    assert "blk.3.ssm_f_a.weight" not in kinds and "blk.0.ffn_gate_inp.weight" not in kinds
    assert "blk.7.attn_kv_a_mqa.weight" in kinds and "blk.4.ssm_beta.weight" in kinds


def test_text_prompts_tokenize_as_smollm2():
    from llama_cpp import Llama
    text = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    ids = [Llama(model_path=str(p), n_ctx=64, verbose=False, vocab_only=True)
           .tokenize(text.encode(), add_bos=False, special=True) for p in (SMOL, tiny("F32"))]
    assert ids[0] == ids[1] and len(ids[0]) > 5


# What llama.cpp (llama-cpp-python 0.3.36) does with each broken file: the text its log must name.
# zero-experts is not refused cleanly: llama.cpp aborts (GGML_ASSERT n_expert_used_max <= n_expert).
BAD_EXPECT = {
    "missing-tensor": (1, "tensor 'blk.1.ssm_beta.weight' not found"),
    "wrong-shape": (1, "tensor 'blk.3.attn_kv_a_mqa.weight' has wrong shape"),
    "head-kv-length": (1, "head_count_kv has wrong array length; expected 8, got 7"),
    "zero-experts": (-6, "n_expert_used_max <= hparams.n_expert"),
}
LOAD = """
import sys
from llama_cpp import Llama
m = Llama(model_path=sys.argv[1], n_ctx=128, verbose=True, n_threads=1)
m.eval([1, 2, 3])
print("RAN" + "_TO_THE_END")
"""


@pytest.fixture(scope="module")
def bad_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad")
    run_writer("--size", "tiny", "--types", "F32", "--bad", ",".join(writer.BAD_VARIANTS), "--out", out)
    return out


@pytest.mark.parametrize("variant", sorted(writer.BAD_VARIANTS))
def test_bad_variants_are_refused_by_llamacpp(variant, bad_dir):
    path = bad_dir / f"hybrid-tiny.F32.bad-{variant}.gguf"
    gguf.GGUFReader(str(path))        # still a well-formed GGUF: only the model is wrong
    env = dict(os.environ, GGML_NO_BACKTRACE="1")     # no gdb attach when it aborts
    r = subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, text=True, timeout=120, env=env)
    rc, text = BAD_EXPECT[variant]
    assert "RAN_TO_THE_END" not in r.stdout
    assert r.returncode == rc and text in r.stderr, (r.returncode, r.stderr[-2000:])


def test_tensor_values_do_not_depend_on_the_plan_order():
    """One generator per tensor name: the same tensor from the tiny plan and from a plan with other
    shapes elsewhere (more experts) is the same array, so the bad variants differ only where named."""
    a = dict((n, f) for n, _, f in writer.plan_tensors(writer.SHAPES["tiny"], 1, vocab=64))
    import dataclasses
    other = dataclasses.replace(writer.SHAPES["tiny"], n_expert=16)
    b = dict((n, f) for n, _, f in writer.plan_tensors(other, 1, vocab=64))
    assert np.array_equal(a["blk.0.attn_q.weight"](), b["blk.0.attn_q.weight"]())
    assert not np.array_equal(a["blk.0.attn_q.weight"](), a["blk.0.attn_k.weight"]())
