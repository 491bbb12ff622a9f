"""Every command on the hybrid (kimi-linear) files, and bad hybrid files.

- generate, chat, logits, tokenize, bench and trace summarize work on hybrid-tiny as on SmolLM2
  (their outputs checked for what each promises; the numbers themselves are checked against the
  oracles in tests/oracle/test_hybrid_engine.py).
- The writer's bad variants (scripts/make_hybrid_model.py --bad) and a few rewritten keys: every
  command that loads the model refuses them with one "ouro: " line naming the tensor or key, exit
  1, never a crash. Flags this architecture cannot honour are usage errors (exit 2).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_bad_input import COMMANDS, assert_error, assert_no_crash, describe, run, run_cmd

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "models" / "hybrid-tiny.Q8_0.gguf"
F32 = ROOT / "models" / "hybrid-tiny.F32.gguf"
WRITER = ROOT / "scripts" / "make_hybrid_model.py"


def ok(ouro_bin, *args, input=None):
    p = run(ouro_bin, *args, input=input, timeout=120)
    assert_no_crash(p)
    assert p.returncode == 0, describe(p)
    return p


def test_generate_and_chat(ouro_bin):
    g = json.loads(ok(ouro_bin, "generate", "-m", TINY, "-p", "The history of Rome", "-n", "8", "--temp", "0",
                      "--json", "-t", "2").stdout)
    assert len(g["tokens"]) == 8 or g["finish_reason"] == "stop", g
    again = json.loads(ok(ouro_bin, "generate", "-m", TINY, "-p", "The history of Rome", "-n", "8", "--temp", "0",
                          "--json", "-t", "1").stdout)
    assert again["tokens"] == g["tokens"], "greedy output depends on the thread count"
    c = ok(ouro_bin, "chat", "-m", TINY, "-n", "6", "--temp", "0", "-t", "2", input="hello\nand again\n")
    assert c.stdout.strip(), describe(c)


def test_tokenize_and_logits(ouro_bin, model_path):
    ids = json.loads(ok(ouro_bin, "tokenize", "-m", TINY, "hello world", "--json").stdout)["ids"]
    smol = json.loads(ok(ouro_bin, "tokenize", "-m", model_path, "hello world", "--json").stdout)["ids"]
    assert ids == smol, "the hybrid files carry SmolLM2's tokenizer"
    j = json.loads(ok(ouro_bin, "logits", "-m", TINY, "--tokens", ",".join(map(str, ids)), "--json", "-t", "2").stdout)
    assert j["n_tokens"] == len(ids) and j["n_vocab"] == 49152 and len(j["logits"][0]) == 49152


def test_bench_reports_both_memories(ouro_bin):
    j = json.loads(ok(ouro_bin, "bench", "-m", F32, "--prompt-len", "32", "--gen-len", "4", "--repeats", "1",
                      "--warmup", "0", "--json", "-t", "2").stdout)
    # hybrid-tiny: 2 MLA layers x (kv_lora 64 + rope 16) f32 per position; 6 KDA layers x
    # (3 conv windows of 3 x 256 + 2 heads x 128 x 128) f32 per sequence.
    assert j["kv_bytes_per_token"] == 2 * 80 * 4, j
    assert j["state_bytes"] == 6 * (3 * 3 * 256 + 2 * 128 * 128) * 4, j
    assert j["prefill_tok_s"]["median"] > 0 and j["decode_tok_s"]["median"] > 0, j
    k8 = json.loads(ok(ouro_bin, "bench", "-m", F32, "--prompt-len", "8", "--gen-len", "2", "--repeats", "1",
                       "--warmup", "0", "--json", "-t", "2", "--kv", "int8").stdout)
    assert k8["kv_bytes_per_token"] == 2 * (80 + 4), k8


def test_bench_fills_the_depth_once(ouro_bin, tmp_path):
    """At --depth, every measurement starts from the same cached tokens: the depth is filled once
    and later measurements go back to it (the KDA state copied back, the MLA rows after it dropped)
    instead of filling it again (at a 32k depth on hybrid-small the second fill was half of a 745 s
    run). The trace shows one fill, and every prefill and decode phase starting at the depth."""
    trace = tmp_path / "t.json"
    ok(ouro_bin, "bench", "-m", F32, "--prompt-len", "16", "--gen-len", "3", "--depth", "40", "--repeats", "2",
       "--warmup", "0", "--json", "-t", "2", "--trace", trace)
    ev = sorted((e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "phase"), key=lambda e: e["ts"])
    names = [e["name"] for e in ev]
    assert names.count("depth_fill") == 1, names
    assert names.count("prefill") == 2 and names.count("decode") == 2 * 3, names
    assert [e["args"]["pos"] for e in ev if e["name"] == "prefill"] == [40, 40], ev
    # each decode measurement starts at the depth: positions 40, 41, 42, twice
    assert [e["args"]["pos"] for e in ev if e["name"] == "decode"] == [40, 41, 42] * 2, ev


def test_trace_summarize_names_the_hybrid_ops(ouro_bin, tmp_path):
    trace = tmp_path / "t.json"
    ok(ouro_bin, "generate", "-m", TINY, "-p", "hi", "-n", "3", "--temp", "0", "--trace", trace, "-t", "2")
    out = ok(ouro_bin, "trace", "summarize", trace).stdout
    for op in ("kda_recurrent", "kda_conv", "mla_attention", "moe_route", "lm_head"):
        assert op in out, f"{op} missing from the summary:\n{out}"


@pytest.mark.parametrize("args,pattern", [
    (["--kv", "v=fp8"], r"one latent row per position"),
    (["--weights", "w8a8", "--w8a8-ops", "qkv"], r"--w8a8-ops, --w8a8-layers and --w8a8-smooth choose among llama's ops"),
    (["--weights", "w8a8", "--w8a8-layers", "0-3"], r"requantizes every matrix but the router"),
    (["--weights", "int4"], r"flag --weights: 'int4' is not one of native, w8a8"),
])
def test_flags_the_hybrid_cannot_honour(ouro_bin, args, pattern):
    assert_error(run(ouro_bin, "generate", "-p", "hi", "-n", "2", *args, "-m", TINY, "-t", "1"), 2, pattern)


# The writer's variants (made once per module) and what the message must match.
WRITER_BAD = {
    "missing-tensor": r"missing tensor 'blk\.1\.ssm_beta\.weight'",
    "wrong-shape": r"tensor 'blk\.3\.attn_kv_a_mqa\.weight' has shape \[64, 79\], expected \[64, 80\]",
    "head-kv-length": r"'kimi-linear\.attention\.head_count_kv' has 7 entries but kimi-linear\.block_count is 8",
    "zero-experts": r"'kimi-linear\.expert_count' is 0 but layers 1\.\.7 are mixture-of-experts",
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad_hybrid")
    subprocess.run([sys.executable, str(WRITER), "--size", "tiny", "--types", "F32", "--bad", ",".join(WRITER_BAD),
                    "--out", str(out)], check=True, capture_output=True, cwd=ROOT)
    return {v: out / f"hybrid-tiny.F32.bad-{v}.gguf" for v in WRITER_BAD}


@pytest.mark.parametrize("variant", sorted(WRITER_BAD))
def test_bad_file_generate(ouro_bin, bad_files, variant):
    p = bad_files[variant]
    assert_error(run_cmd(ouro_bin, "generate", p), 1, WRITER_BAD[variant], names=[p])


# tokenize and detokenize read only the tokenizer keys, which these files keep intact.
@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"tokenize", "detokenize"}))
def test_bad_file_every_command(ouro_bin, bad_files, command):
    p = bad_files["missing-tensor"]
    assert_error(run_cmd(ouro_bin, command, p), 1, r"missing tensor", names=[p])
