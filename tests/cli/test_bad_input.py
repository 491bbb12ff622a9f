"""Bad input to the `ouro` CLI: unreadable/corrupt/unsupported model files and invalid flags.

Contract (docs/cli.md): exit 0 ok, 1 runtime error (unreadable/corrupt model, ...), 2 usage error
(unknown flag, bad value, missing argument); errors are ONE line on stderr starting with "ouro: ".
Every error case here also checks: no signal / crash text, nothing on stdout, and that the message
names what is wrong (the file, the field, the flag).

Decisions this file makes where docs/cli.md is silent:
  * a prompt (or --tokens list, or -n budget) that does not fit the context is a usage error (2),
    detected before any work is done; so is a token id outside the vocabulary;
  * `ouro` with no command is a usage error (2) and must say so in one "ouro: " line, like any error.
"""
import json
import os
import pathlib
import random
import re
import resource
import shutil
import struct
import subprocess
import tempfile

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

import synth
from ouro_testlib import engine_allows

CRASH_MARKERS = ("Segmentation", "terminate called", "internal error", "Aborted", "core dumped",
                 "AddressSanitizer", "runtime error:", "std::")

# One cheap, model-loading invocation per subcommand (single thread to keep CPU use modest).
COMMANDS = {
    "generate": (["generate", "-p", "hi", "-n", "2", "--temp", "0", "-t", "1"], None),
    "logits": (["logits", "--tokens", "1,2", "--json", "-t", "1"], None),
    "tokenize": (["tokenize", "hi"], None),
    "detokenize": (["detokenize", "1"], None),
    "bench": (["bench", "--prompt-len", "4", "--gen-len", "2", "--repeats", "1", "--warmup", "0", "-t", "1"], None),
    "chat": (["chat", "-n", "2", "--temp", "0", "-t", "1"], "hi\n"),
}


NOBODY = 65534


def run(ouro_bin, *args, input=None, timeout=60, limit_as=None, as_nobody=False):
    """Runs ouro; never raises on a non-zero exit. limit_as: RLIMIT_AS in bytes for the child;
    as_nobody: the child drops root to user and group nobody (permission cases, when tests run as root)."""
    def preexec():
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
        if as_nobody:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
    return subprocess.run([str(ouro_bin), *map(str, args)], capture_output=True, text=True, errors="replace",
                          input=input if input is not None else "", timeout=timeout,
                          preexec_fn=preexec if limit_as is not None or as_nobody else None)


def describe(proc):
    return f"$ {' '.join(map(str, proc.args))}\nexit {proc.returncode}\nstdout: {proc.stdout[:500]!r}\nstderr: {proc.stderr[:1500]!r}"


def assert_no_crash(proc):
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}\n{describe(proc)}"
    assert proc.returncode not in (134, 136, 137, 139), f"crash-like exit code\n{describe(proc)}"
    for m in CRASH_MARKERS:
        assert m not in proc.stderr, f"crash marker {m!r} in stderr\n{describe(proc)}"


def assert_error(proc, code, *patterns, names=None):
    """Exit `code`, nothing on stdout, exactly one stderr line 'ouro: ...' matching every regex in
    `patterns` (case-insensitive) and containing each string in `names`. Returns the line."""
    assert_no_crash(proc)
    assert proc.returncode == code, f"expected exit {code}\n{describe(proc)}"
    assert proc.stdout == "", f"stdout must be empty on error\n{describe(proc)}"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, f"expected exactly one stderr line\n{describe(proc)}"
    line = lines[0]
    assert line.startswith("ouro: "), f"stderr must start with 'ouro: '\n{describe(proc)}"
    assert len(line) > len("ouro: ") + 5, f"message too short to be useful\n{describe(proc)}"
    for n in names or ():
        assert str(n) in line, f"message does not name {n!r}\n{describe(proc)}"
    # Match the patterns against the message without file paths (a tmp path may contain any word).
    text = line
    for n in names or ():
        text = text.replace(str(n), "<file>")
    text = re.sub(r"(?<![\w-])/\S*", "<path>", text)
    for p in patterns:
        assert re.search(p, text, re.I), f"message does not match /{p}/ (paths removed: {text!r})\n{describe(proc)}"
    return line


def run_cmd(ouro_bin, command, model, extra=(), as_nobody=False):
    args, stdin = COMMANDS[command]
    return run(ouro_bin, *args, *extra, "-m", model, input=stdin, as_nobody=as_nobody)


# ============================================================================================
# The tiny synthetic model is valid (so that the broken variants below are meaningful)


def test_tiny_model_generates(ouro_bin, tiny_model):
    proc = run(ouro_bin, "generate", "-p", "hi", "-n", "4", "--temp", "0", "-m", tiny_model)
    assert_no_crash(proc)
    assert proc.returncode == 0, describe(proc)
    assert proc.stderr == "", describe(proc)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_tiny_model_every_command(ouro_bin, tiny_model, command):
    proc = run_cmd(ouro_bin, command, tiny_model)
    assert_no_crash(proc)
    assert proc.returncode == 0, describe(proc)


def test_tiny_model_tokenizer(ouro_bin, tiny_model):
    tokens, _, _ = synth.tiny_vocab()
    proc = run(ouro_bin, "tokenize", "<|im_start|>hi there<|im_end|>", "--json", "-m", tiny_model)
    assert proc.returncode == 0, describe(proc)
    out = json.loads(proc.stdout)
    assert out["ids"][0] == 1 and out["ids"][-1] == 2
    assert out["ids"][1] == tokens.index("hi")
    assert "".join(out["pieces"]) == "<|im_start|>hi there<|im_end|>"


def test_tiny_model_gguf_v2(ouro_bin, tiny_model, tmp_path):
    """GGUF v2 has v3's layout (64-bit counts); the reader supports both."""
    path = tmp_path / "v2.gguf"
    path.write_bytes(synth.patch_bytes(tiny_model.read_bytes(), synth.VERSION_OFFSET, "<I", 2))
    proc = run(ouro_bin, "generate", "-p", "hi", "-n", "2", "--temp", "0", "-t", "1", "-m", path)
    assert_no_crash(proc)
    assert proc.returncode == 0, describe(proc)


@pytest.mark.parametrize("variant", ["tied_output", "no_head_count_kv", "q8_0", "q4_0", "q4_1", "alignment_64",
                                     "no_optional_keys"])
def test_tiny_model_valid_variants(ouro_bin, tmp_path, variant):
    if variant == "tied_output":
        plan = synth.tiny_llama_plan(tied_output=True)
    elif variant == "no_head_count_kv":
        plan = synth.tiny_llama_plan(n_head_kv=4).drop_kv("llama.attention.head_count_kv")
    elif variant.startswith("q"):
        plan = synth.tiny_llama_plan().quantize(QT[variant.upper()])
    elif variant == "alignment_64":
        plan = synth.tiny_llama_plan()
        plan.alignment = 64
    else:
        plan = synth.tiny_llama_plan()
        for k in ("llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon", "llama.rope.dimension_count",
                  "tokenizer.chat_template", "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
                  "llama.vocab_size", "general.name"):
            plan.drop_kv(k)
    path = plan.write(tmp_path / f"{variant}.gguf")
    proc = run(ouro_bin, "generate", "-p", "hi", "-n", "4", "--temp", "0", "-t", "1", "-m", path)
    assert_no_crash(proc)
    assert proc.returncode == 0, describe(proc)


# ============================================================================================
# Missing / unreadable / wrong-type model files, for every model-loading subcommand

PNG_HEADER = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"


def make_bad_file(kind, tmp_path):
    """Returns (path, regex the message must match)."""
    if kind == "missing":
        return tmp_path / "does-not-exist.gguf", r"no such file|not found|does not exist|cannot open"
    if kind == "directory":
        d = tmp_path / "a-directory.gguf"
        d.mkdir()
        return d, r"directory|not a (regular )?file"
    if kind == "no_permission":
        # As root a chmod 000 file is still readable: test_bad_model_file then runs ouro as nobody,
        # from a folder that others may search (pytest's own tmp folders are 0700).
        d = pathlib.Path(tempfile.mkdtemp(prefix="ouro-unreadable-"))
        d.chmod(0o711)
        p = d / "unreadable.gguf"
        p.write_bytes(b"GGUF" + b"\0" * 60)
        p.chmod(0)
        return p, r"permission|denied|cannot open|cannot read"
    if kind == "text":
        p = tmp_path / "notes.gguf"
        p.write_text("This is a text file, not a model.\n" * 20)
        return p, r"magic|not a GGUF"
    if kind == "png":
        p = tmp_path / "image.gguf"
        p.write_bytes(PNG_HEADER + bytes(range(256)) * 4)
        return p, r"magic|not a GGUF"
    if kind == "empty":
        p = tmp_path / "empty.gguf"
        p.write_bytes(b"")
        return p, r"empty|too small|truncated|0 bytes"
    if kind == "dev_null":  # a character device, not a file
        return pathlib.Path("/dev/null"), r"regular file|device|not a (regular )?file|empty|too small"
    if kind == "tiny_text":  # shorter than the magic
        p = tmp_path / "short.gguf"
        p.write_bytes(b"GG")
        return p, r"too small|truncated|magic|not a GGUF"
    if kind == "magic_only":
        p = tmp_path / "magic.gguf"
        p.write_bytes(b"GGUF")
        return p, r"too small|truncated"
    raise AssertionError(kind)


BAD_FILE_KINDS = ["missing", "directory", "no_permission", "text", "png", "empty", "tiny_text", "magic_only",
                  "dev_null"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", BAD_FILE_KINDS)
def test_bad_model_file(ouro_bin, tmp_path, kind, command):
    path, pattern = make_bad_file(kind, tmp_path)
    as_nobody = kind == "no_permission" and os.geteuid() == 0
    try:
        if as_nobody:  # a copy of the binary beside the file: the checkout may sit where nobody cannot reach
            ouro_bin = shutil.copy(ouro_bin, path.parent / "ouro")
            os.chmod(ouro_bin, 0o755)
        proc = run_cmd(ouro_bin, command, path, as_nobody=as_nobody)
        assert_error(proc, 1, pattern, names=[path])
    finally:
        if kind == "no_permission":
            shutil.rmtree(path.parent)


def test_bad_model_from_env(ouro_bin, tmp_path):
    """$OURO_MODEL is honoured and a bad one is reported like --model."""
    path, pattern = make_bad_file("text", tmp_path)
    env = dict(os.environ, OURO_MODEL=str(path))
    proc = subprocess.run([str(ouro_bin), "tokenize", "hi"], capture_output=True, text=True, env=env, timeout=60)
    assert_error(proc, 1, pattern, names=[path])


# ============================================================================================
# Truncated copies of the real model


@pytest.fixture(scope="module")
def real_layout(model_path):
    return synth.gguf_layout_of_file(model_path, max_header_bytes=8 << 20)


def truncation_points(layout, size):
    tok = layout.kv("tokenizer.ggml.tokens")
    merges = layout.kv("tokenizer.ggml.merges")
    arch = layout.kv("general.architecture")
    t0 = layout.tensors[0]
    mid_t = layout.tensors[len(layout.tensors) // 2]
    last = max(layout.tensors, key=lambda t: t.rel_offset)
    return {
        "in_magic": 2,
        "after_magic": 4,
        "in_version": 6,
        "in_tensor_count": 12,
        "in_kv_count": 20,
        "header_only": 24,
        "in_first_key_len": 28,
        "in_first_key": arch.start + 12,
        "before_first_value": arch.value_offset,
        "in_first_value": arch.value_offset + 10,
        "in_tokens_array_header": tok.value_offset + 6,
        "in_tokens_array": tok.value_offset + 300_000,
        "in_merges_array": merges.value_offset + 200_000,
        "end_of_metadata": layout.tensor_info_start,
        "in_first_tensor_name": t0.start + 12,
        "in_first_tensor_ne": t0.ne_offsets[0] + 3,
        "in_middle_tensor_info": mid_t.type_offset + 1,
        "end_of_tensor_infos": layout.tensor_info_end,
        "data_start": layout.data_start,
        "in_first_tensor_data": layout.data_start + 4096,
        "middle_of_data": size // 2,
        "in_last_tensor": layout.data_start + last.rel_offset + 10,
        "one_byte_short": size - 1,
    }


TRUNCATIONS = ["in_magic", "after_magic", "in_version", "in_tensor_count", "in_kv_count", "header_only",
               "in_first_key_len", "in_first_key", "before_first_value", "in_first_value", "in_tokens_array_header",
               "in_tokens_array", "in_merges_array", "end_of_metadata", "in_first_tensor_name", "in_first_tensor_ne",
               "in_middle_tensor_info", "end_of_tensor_infos", "data_start", "in_first_tensor_data",
               "middle_of_data", "in_last_tensor", "one_byte_short"]


@pytest.mark.parametrize("where", TRUNCATIONS)
def test_truncated_real_model(ouro_bin, model_path, real_layout, tmp_path, where):
    size = os.path.getsize(model_path)
    cut = truncation_points(real_layout, size)[where]
    assert 0 < cut < size
    path = synth.write_prefix(model_path, tmp_path / f"cut-{cut}.gguf", cut)
    try:
        # tokenize needs only the metadata, generate the whole model; both must reject the file.
        for command in ("tokenize", "generate"):
            proc = run_cmd(ouro_bin, command, path)
            assert_error(proc, 1, names=[path])
    finally:
        os.unlink(path)


# ============================================================================================
# Byte-patched headers of the tiny model


@pytest.fixture(scope="module")
def tiny_bytes(tmp_path_factory):
    path = synth.write_tiny_llama(tmp_path_factory.mktemp("tiny_bytes") / "tiny.gguf")
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def tiny_aligned_bytes(tmp_path_factory):
    plan = synth.tiny_llama_plan()
    plan.alignment = 64
    path = plan.write(tmp_path_factory.mktemp("tiny_aligned") / "tiny64.gguf")
    with open(path, "rb") as f:
        return f.read()


U64_MAX = (1 << 64) - 1


def header_corruptions(data):
    """name -> (patched bytes, regex for the message). Offsets come from synth.gguf_layout."""
    L = synth.gguf_layout(data)
    P = synth.patch_bytes
    size = len(data)
    first = L.kvs[0]  # general.architecture
    name = L.kv("general.name")
    tok = L.kv("tokenizer.ggml.tokens")
    ttype = L.kv("tokenizer.ggml.token_type")
    add_bos = L.kv("tokenizer.ggml.add_bos_token")
    t0 = L.tensors[0]
    t1 = next(t for t in L.tensors if len(t.ne) == 2)  # a matrix
    count_re = r"count|exceeds|absurd|too (many|large)|truncat"
    return {
        "bad_magic": (b"GGUX" + data[4:], r"magic|not a GGUF"),
        "magic_lowercase": (b"gguf" + data[4:], r"magic|not a GGUF"),
        "version_0": (P(data, 4, "<I", 0), r"version"),
        "version_1": (P(data, 4, "<I", 1), r"version"),
        "version_99": (P(data, 4, "<I", 99), r"version"),
        "version_big_endian_3": (P(data, 4, ">I", 3), r"version|endian"),
        "tensor_count_huge": (P(data, 8, "<Q", 1 << 63), r"tensor"),
        "tensor_count_max": (P(data, 8, "<Q", U64_MAX), r"tensor"),
        "tensor_count_plus_one": (P(data, 8, "<Q", L.tensor_count + 1), r""),
        "tensor_count_1000": (P(data, 8, "<Q", 1000), r""),
        "kv_count_huge": (P(data, 16, "<Q", 1 << 63), r"kv|metadata|key"),
        "kv_count_max": (P(data, 16, "<Q", U64_MAX), r"kv|metadata|key"),
        "kv_count_plus_one": (P(data, 16, "<Q", L.kv_count + 1), r""),
        "kv_count_minus_one": (P(data, 16, "<Q", L.kv_count - 1), r""),
        "kv_count_zero": (P(data, 16, "<Q", 0), r""),
        "key_len_past_eof": (P(data, first.start, "<Q", size), r"string|length|exceeds|truncat"),
        "key_len_huge": (P(data, first.start, "<Q", 1 << 62), r"string|length|exceeds|truncat"),
        "key_len_max": (P(data, first.start, "<Q", U64_MAX), r"string|length|exceeds|truncat"),
        "value_string_len_past_eof": (P(data, name.value_offset, "<Q", size), r"string|length|exceeds|truncat"),
        "value_string_len_max": (P(data, name.value_offset, "<Q", U64_MAX), r"string|length|exceeds|truncat"),
        "token_string_len_past_eof": (P(data, tok.value_offset + 12, "<Q", size), r"string|length|exceeds|truncat"),
        "value_type_13": (P(data, name.type_offset, "<I", 13), r"type"),
        "value_type_max": (P(data, name.type_offset, "<I", 0xFFFFFFFF), r"type"),
        "array_elem_type_13": (P(data, tok.elem_type_offset, "<I", 13), r"type"),
        "array_elem_type_max": (P(data, tok.elem_type_offset, "<I", 0x80000000), r"type"),
        "array_elem_type_nested": (P(data, tok.elem_type_offset, "<I", int(VT.ARRAY)), r""),
        "array_len_huge": (P(data, tok.count_offset, "<Q", 1 << 62), r"array|length|exceeds|absurd"),
        "array_len_max": (P(data, tok.count_offset, "<Q", U64_MAX), r"array|length|exceeds|absurd"),
        "array_len_past_eof": (P(data, tok.count_offset, "<Q", size), r"array|length|exceeds|absurd|truncat"),
        "array_len_2pow32_plus_1": (P(data, tok.count_offset, "<Q", (1 << 32) + 1), r"array|length|exceeds|absurd"),
        "token_type_array_len_short": (P(data, ttype.count_offset, "<Q", 5), r""),
        "bool_value_2": (P(data, add_bos.value_offset, "<B", 2), r"bool"),
        "architecture_key_renamed": (data.replace(b"general.architecture", b"general.architecturX", 1), r"architecture"),
        "duplicate_key": (data.replace(b"llama.rope.freq_base", b"llama.context_length", 1), r"duplicate|context_length"),
        "tensor_n_dims_0": (P(data, t0.n_dims_offset, "<I", 0), r"dim"),
        "tensor_n_dims_5": (P(data, t0.n_dims_offset, "<I", 5), r"dim"),
        "tensor_n_dims_max": (P(data, t0.n_dims_offset, "<I", 0xFFFFFFFF), r"dim"),
        "tensor_ne_0": (P(data, t1.ne_offsets[0], "<Q", 0), r""),
        "tensor_ne_huge": (P(data, t1.ne_offsets[0], "<Q", 1 << 62), r""),
        "tensor_ne_max": (P(data, t1.ne_offsets[-1], "<Q", U64_MAX), r""),
        "tensor_ne_overflow": (P(P(data, t1.ne_offsets[0], "<Q", 1 << 32), t1.ne_offsets[1], "<Q", 1 << 32), r""),
        "tensor_type_99": (P(data, t1.type_offset, "<I", 99), r"type"),
        "tensor_type_max": (P(data, t1.type_offset, "<I", 0xFFFFFFFF), r"type"),
        "tensor_type_removed_q4_2": (P(data, t1.type_offset, "<I", 4), r"type|Q4_2"),
        "tensor_offset_misaligned": (P(data, t1.offset_offset, "<Q", t1.rel_offset + 4), r"align|offset"),
        "tensor_offset_past_eof": (P(data, t1.offset_offset, "<Q", size), r"past|exceeds|truncat|offset|end"),
        "tensor_offset_max": (P(data, t1.offset_offset, "<Q", U64_MAX - 31), r""),
        "tensor_name_len_huge": (P(data, t0.start, "<Q", 1 << 62), r"string|length|exceeds|truncat|name"),
        "duplicate_tensor_name": (data.replace(b"blk.0.attn_q.weight", b"blk.0.attn_k.weight", 1), r""),
        "no_tensor_data": (data[:L.data_start], r""),
        "half_tensor_data": (data[:L.data_start + (size - L.data_start) // 2], r""),
    }


CORRUPTIONS = ["bad_magic", "magic_lowercase", "version_0", "version_1", "version_99", "version_big_endian_3",
               "tensor_count_huge", "tensor_count_max", "tensor_count_plus_one", "tensor_count_1000",
               "kv_count_huge", "kv_count_max", "kv_count_plus_one", "kv_count_minus_one", "kv_count_zero",
               "key_len_past_eof", "key_len_huge", "key_len_max", "value_string_len_past_eof",
               "value_string_len_max", "token_string_len_past_eof", "value_type_13", "value_type_max",
               "array_elem_type_13", "array_elem_type_max", "array_elem_type_nested", "array_len_huge",
               "array_len_max", "array_len_past_eof", "array_len_2pow32_plus_1", "token_type_array_len_short",
               "bool_value_2", "architecture_key_renamed", "duplicate_key", "tensor_n_dims_0", "tensor_n_dims_5",
               "tensor_n_dims_max", "tensor_ne_0", "tensor_ne_huge", "tensor_ne_max", "tensor_ne_overflow",
               "tensor_type_99", "tensor_type_max", "tensor_type_removed_q4_2", "tensor_offset_misaligned",
               "tensor_offset_past_eof", "tensor_offset_max", "tensor_name_len_huge", "duplicate_tensor_name",
               "no_tensor_data", "half_tensor_data"]


# Breaks only what running the model needs: `tokenize` (which reads only the tokenizer) may accept it.
ONLY_GENERATE_MUST_FAIL = {"architecture_key_renamed"}


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_corrupt_header(ouro_bin, tiny_bytes, tmp_path, name):
    data, pattern = header_corruptions(tiny_bytes)[name]
    assert data != tiny_bytes
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    for command in ("generate",) if name in ONLY_GENERATE_MUST_FAIL else ("tokenize", "generate"):
        proc = run_cmd(ouro_bin, command, path)
        assert_error(proc, 1, pattern, names=[path])


def test_corruption_list_is_complete(tiny_bytes):
    assert sorted(header_corruptions(tiny_bytes)) == sorted(CORRUPTIONS)


@pytest.mark.parametrize("value", [0, 7, 12, 1 << 31, U64_MAX])
def test_bad_alignment(ouro_bin, tiny_aligned_bytes, tmp_path, value):
    L = synth.gguf_layout(tiny_aligned_bytes)
    kv = L.kv("general.alignment")
    assert kv.vtype == VT.UINT32
    data = synth.patch_bytes(tiny_aligned_bytes, kv.value_offset, "<I", value & 0xFFFFFFFF)
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    proc = run_cmd(ouro_bin, "tokenize", path)
    assert_error(proc, 1, r"align", names=[path])


# ============================================================================================
# Well-formed GGUF files (gguf.GGUFWriter) that are not a model ouro can run


def _plan(**kw):
    return synth.tiny_llama_plan(**kw)


def semantic_cases():
    """name -> (plan builder, regex for the message). Each is the valid tiny model with one thing broken."""
    c = {}
    # architecture
    c["arch_mamba"] = (lambda: _with(_plan(), arch="mamba"), r"architecture.*mamba|mamba.*architecture")
    c["arch_empty"] = (lambda: _with(_plan(), arch=""), r"architecture")
    c["arch_missing"] = (lambda: _with(_plan(), arch=None), r"architecture")
    # unsupported tensor types (raw bytes of a type ouro does not implement) on a tensor the model uses
    c["type_q5_0_ffn_gate"] = (lambda: _plan().set_raw_tensor("blk.0.ffn_gate.weight", QT.Q5_0, (128, 64)), r"Q5_0")
    c["type_q5_k_ffn_down"] = (lambda: _plan(n_ff=256).set_raw_tensor("blk.1.ffn_down.weight", QT.Q5_K, (64, 256)), r"Q5_K")
    c["type_iq2_xxs_ffn_down"] = (lambda: _plan(n_ff=256).set_raw_tensor("blk.0.ffn_down.weight", QT.IQ2_XXS, (64, 256)),
                                  r"IQ2_XXS")
    c["type_q2_k_ffn_down"] = (lambda: _plan(n_ff=256).set_raw_tensor("blk.0.ffn_down.weight", QT.Q2_K, (64, 256)), r"Q2_K")
    # block size: Q4_K (256) on a 64-wide tensor cannot be written by GGUFWriter; Q8_0 on a norm is a type error
    c["norm_not_f32"] = (lambda: _plan().set_raw_tensor("blk.0.attn_norm.weight", QT.Q8_0, (64,)),
                         r"attn_norm")
    # missing tensors
    for t in ["token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight", "blk.0.attn_q.weight",
              "blk.1.attn_k.weight", "blk.1.attn_v.weight", "blk.0.attn_output.weight", "blk.1.ffn_norm.weight",
              "blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.0.ffn_down.weight"]:
        c[f"missing_{t}"] = ((lambda t=t: _plan().drop_tensor(t)), re.escape(t))
    # wrong shapes (numpy order: rows, cols)
    rng = np.random.default_rng(1)
    f = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.05  # noqa: E731
    n_vocab = len(synth.tiny_vocab()[0])
    c["shape_attn_q_half"] = (lambda: _plan().set_tensor("blk.0.attn_q.weight", f(32, 64)), r"attn_q")
    c["shape_attn_k_as_q"] = (lambda: _plan().set_tensor("blk.1.attn_k.weight", f(64, 64)), r"attn_k")
    c["shape_ffn_down_transposed"] = (lambda: _plan().set_tensor("blk.0.ffn_down.weight", f(128, 64)), r"ffn_down")
    c["shape_ffn_up_3d"] = (lambda: _plan().set_tensor("blk.1.ffn_up.weight", f(1, 128, 64)), r"ffn_up")
    c["shape_norm_short"] = (lambda: _plan().set_tensor("output_norm.weight", f(32)), r"output_norm")
    c["shape_norm_2d"] = (lambda: _plan().set_tensor("blk.0.ffn_norm.weight", f(1, 64)), r"ffn_norm")
    c["shape_embd_width"] = (lambda: _plan().set_tensor("token_embd.weight", f(n_vocab, 32)), r"token_embd|embedding")
    c["shape_embd_1d"] = (lambda: _plan().set_tensor("token_embd.weight", f(n_vocab * 64)), r"token_embd")
    c["shape_embd_fewer_rows"] = (lambda: _plan().set_tensor("token_embd.weight", f(n_vocab - 10, 64)),
                                  r"token|vocab|embd|embedding")
    c["shape_output_fewer_rows"] = (lambda: _plan().set_tensor("output.weight", f(n_vocab - 1, 64)), r"output")
    # missing hyper-parameters
    for k in ["llama.block_count", "llama.embedding_length", "llama.attention.head_count",
              "llama.feed_forward_length", "llama.context_length", "tokenizer.ggml.model", "tokenizer.ggml.tokens",
              "tokenizer.ggml.merges"]:
        c[f"missing_key_{k}"] = ((lambda k=k: _plan().drop_kv(k)), re.escape(k))
    # hyper-parameters with bad values / types
    bad = {
        "block_count_0": ("llama.block_count", 0, None, r"block_count"),
        "block_count_3": ("llama.block_count", 3, None, r"blk\.2\."),  # more layers than tensors
        "block_count_huge": ("llama.block_count", 0xFFFFFFFF, None, r"block_count"),
        "embedding_length_0": ("llama.embedding_length", 0, None, r"embedding_length"),
        "embedding_length_32": ("llama.embedding_length", 32, None, r"embd|embedding|shape"),
        "head_count_0": ("llama.attention.head_count", 0, None, r"head_count"),
        "head_count_3": ("llama.attention.head_count", 3, None, r"head_count|head"),
        "head_count_kv_0": ("llama.attention.head_count_kv", 0, None, r"head_count_kv"),
        "head_count_kv_3": ("llama.attention.head_count_kv", 3, None, r"head_count"),
        "head_count_kv_8": ("llama.attention.head_count_kv", 8, None, r"head_count"),
        "feed_forward_length_0": ("llama.feed_forward_length", 0, None, r"feed_forward_length"),
        "context_length_0": ("llama.context_length", 0, None, r"context_length"),
        "block_count_string": ("llama.block_count", "2", VT.STRING, r"block_count"),
        "block_count_float": ("llama.block_count", 2.0, VT.FLOAT32, r"block_count"),
        "block_count_negative": ("llama.block_count", -2, VT.INT32, r"block_count"),
        "rope_freq_base_negative": ("llama.rope.freq_base", -1.0, VT.FLOAT32, r"freq_base"),
        "rope_freq_base_nan": ("llama.rope.freq_base", float("nan"), VT.FLOAT32, r"freq_base"),
        "rms_eps_0": ("llama.attention.layer_norm_rms_epsilon", 0.0, VT.FLOAT32, r"epsilon"),
        "rope_dim_odd": ("llama.rope.dimension_count", 7, None, r"rope|dimension"),
        "architecture_as_int": ("general.architecture", 5, VT.UINT32, r"architecture"),
        "tokenizer_model_llama": ("tokenizer.ggml.model", "llama", None, r"tokenizer"),
        "tokenizer_model_empty": ("tokenizer.ggml.model", "", None, r"tokenizer"),
        "tokens_not_strings": ("tokenizer.ggml.tokens", list(range(len(synth.tiny_vocab()[0]))), VT.ARRAY,
                               r"tokenizer\.ggml\.tokens"),
        "tokens_too_few": ("tokenizer.ggml.tokens", ["a", "b"], VT.ARRAY, r"token|vocab|embedding"),
        "eos_out_of_range": ("tokenizer.ggml.eos_token_id", 100000, None, r"eos"),
        "bos_out_of_range": ("tokenizer.ggml.bos_token_id", 0xFFFFFFFF, None, r"bos"),
        "merge_without_space": ("tokenizer.ggml.merges", ["hi"], None, r"merges"),
        "token_type_wrong_length": ("tokenizer.ggml.token_type", [1, 1, 1], None, r"token_type"),
    }
    for name, (key, value, vtype, pattern) in bad.items():
        c[f"bad_{name}"] = ((lambda key=key, value=value, vtype=vtype: _set(_plan(), key, value, vtype)), pattern)
    # make these reach the check they are about (not an earlier, consistent-but-unrelated one)
    c["bad_embedding_length_32"] = (lambda: _set(_plan(), "llama.embedding_length", 32, None)
                                    .drop_kv("llama.rope.dimension_count"), r"embd|embedding")
    c["bad_tokens_too_few"] = (lambda: _set(_plan(), "tokenizer.ggml.tokens", ["a", "b"], VT.ARRAY)
                               .drop_kv("tokenizer.ggml.token_type"), r"token|vocab")
    return c


def _with(plan, **kw):
    for k, v in kw.items():
        setattr(plan, k, v)
    return plan


def _set(plan, key, value, vtype):
    sub = None
    if vtype == VT.ARRAY:
        sub = VT.STRING if (not value or isinstance(value[0], str)) else VT.INT32
    elif isinstance(value, list):
        vtype, sub = VT.ARRAY, plan.kv[key][2]
    return plan.set_kv(key, value, vtype, sub)


SEMANTIC = sorted(semantic_cases())


@pytest.mark.parametrize("name", SEMANTIC)
def test_unsupported_model(ouro_bin, tmp_path, name):
    build, pattern = semantic_cases()[name]
    path = build().write(tmp_path / "model.gguf")
    proc = run(ouro_bin, "generate", "-p", "hi", "-n", "2", "--temp", "0", "-t", "1", "-m", path)
    assert_error(proc, 1, pattern, names=[path])


# ============================================================================================
# Flag and prompt errors (real model: these must fail before or right after loading)

LONG_PROMPT = "The quick brown fox jumps over the lazy dog. " * 40  # ~400 tokens


@pytest.mark.parametrize("args,pattern", [
    (["generate", "-p", LONG_PROMPT, "-n", "1", "--ctx", "64"], r"context"),
    (["generate", "-p", LONG_PROMPT, "-n", "1", "--ctx", "64", "--chat"], r"context"),
    (["generate", "-p", "hi", "-n", "100", "--ctx", "64"], r"context"),
    (["generate", "-p", "hi", "-n", "9000"], r"context"),  # default ctx 4096
    (["logits", "--text", LONG_PROMPT, "--json", "--ctx", "64"], r"context"),
    (["logits", "--tokens", ",".join(["1"] * 65), "--json", "--ctx", "64"], r"context"),
    (["bench", "--prompt-len", "100", "--gen-len", "0", "--ctx", "64"], r"context|ctx"),
    (["bench", "--prompt-len", "0", "--gen-len", "100", "--ctx", "64"], r"context|ctx"),
    (["generate", "-p", "hi", "--ctx", "100000"], r"ctx|context"),
])
def test_context_overflow(ouro_bin, model_path, args, pattern):
    proc = run(ouro_bin, *args, "-t", "1", "-m", model_path)
    assert_error(proc, 2, pattern)


def test_chat_message_longer_than_context(ouro_bin, model_path):
    """One chat line that cannot fit even an empty context: a clear context error, no crash."""
    proc = run(ouro_bin, "chat", "--ctx", "64", "-n", "4", "--temp", "0", "-t", "1", "-m", model_path,
               input=LONG_PROMPT + "\n")
    assert_no_crash(proc)
    assert proc.returncode in (1, 2), describe(proc)
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("ouro: ") and re.search(r"context", last, re.I), describe(proc)


FLAG_CASES = [
    # unknown flags / arguments
    (["generate", "-p", "hi", "--bogus"], r"--bogus"),
    (["generate", "-p", "hi", "--bogus=1"], r"--bogus"),
    (["generate", "-p", "hi", "extra"], r"extra"),
    (["tokenize", "hi", "--temp", "0"], r"--temp"),
    (["logits", "--tokens", "1", "--json", "-p", "hi"], r"-p"),
    (["bench", "--chat"], r"--chat"),
    (["chat", "-p", "hi"], r"-p"),
    (["detokenize", "1", "--json"], r"--json"),
    (["generate", "-p", "hi", "--json=yes"], r"--json"),
    # missing values / arguments
    (["generate", "-p"], r"-p"),
    (["generate", "-p", "hi", "-n"], r"-n"),
    (["generate", "-p", "hi", "--temp"], r"--temp"),
    (["generate", "-p", "hi", "--model"], r"--model"),
    (["logits", "--json", "--tokens"], r"--tokens"),
    (["bench", "--prompt-len"], r"--prompt-len"),
    (["tokenize", "--batch"], r"--batch"),
    (["generate"], r"prompt|-p"),
    (["tokenize"], r"TEXT|argument|batch"),
    (["logits", "--json"], r"--text|--tokens"),
    (["logits", "--tokens", "1"], r"--out|--json"),
    (["logits", "--tokens", "1", "--text", "hi", "--json"], r"--text|--tokens"),
    # non-numeric
    (["generate", "-p", "hi", "-n", "abc"], r"-n"),
    (["generate", "-p", "hi", "-n", "1.5"], r"-n"),
    (["generate", "-p", "hi", "-n", ""], r"-n"),
    (["generate", "-p", "hi", "--temp", "warm"], r"--temp"),
    (["generate", "-p", "hi", "--temp", "nan"], r"--temp"),
    (["generate", "-p", "hi", "--temp", "inf"], r"--temp"),
    (["generate", "-p", "hi", "--top-k", "x"], r"--top-k"),
    (["generate", "-p", "hi", "--seed", "0x"], r"--seed"),
    (["generate", "-p", "hi", "--threads", "two"], r"--threads"),
    (["generate", "-p", "hi", "--ctx", "big"], r"--ctx"),
    (["bench", "--repeats", "many"], r"--repeats"),
    (["generate", "-p", "hi", "-n", "99999999999999999999999"], r"-n"),
    # out of range
    (["generate", "-p", "hi", "--temp", "-1"], r"--temp"),
    (["generate", "-p", "hi", "--top-p", "1.5"], r"--top-p"),
    (["generate", "-p", "hi", "--top-p", "-0.1"], r"--top-p"),
    (["generate", "-p", "hi", "--min-p", "2"], r"--min-p"),
    (["generate", "-p", "hi", "--top-k", "-1"], r"--top-k"),
    (["generate", "-p", "hi", "--repeat-penalty", "-1"], r"--repeat-penalty"),
    (["generate", "-p", "hi", "--repeat-last-n", "-1"], r"--repeat-last-n"),
    (["generate", "-p", "hi", "--seed", "-1"], r"--seed"),
    (["generate", "-p", "hi", "-n", "-5"], r"-n"),
    (["generate", "-p", "hi", "--threads", "0"], r"--threads"),
    (["generate", "-p", "hi", "-t", "-3"], r"-t|--threads"),
    (["generate", "-p", "hi", "--threads", "100000"], r"--threads"),
    (["generate", "-p", "hi", "--ctx", "0"], r"--ctx"),
    (["generate", "-p", "hi", "--ctx", "-5"], r"--ctx"),
    (["chat", "-n", "0"], r"-n"),
    (["bench", "--repeats", "0"], r"--repeats"),
    (["bench", "--prompt-len", "0", "--gen-len", "0"], r"prompt-len|gen-len|nothing"),
    (["bench", "--prompt-len", "-1"], r"--prompt-len"),
    # unknown ISA
    (["generate", "-p", "hi", "--isa", "sse9"], r"--isa|sse9"),
    (["generate", "-p", "hi", "--isa", ""], r"--isa"),
    (["tokenize", "hi", "--isa", "neon"], r"--isa|neon"),
    (["bench", "--isa", "AVX2"], r"--isa|AVX2"),
]


@pytest.mark.parametrize("args,pattern", FLAG_CASES, ids=[" ".join(a) for a, _ in FLAG_CASES])
def test_usage_error(ouro_bin, model_path, args, pattern):
    # -m goes right after the command, so that a flag missing its value stays last
    proc = run(ouro_bin, args[0], "-m", model_path, *args[1:])
    assert_error(proc, 2, pattern)


@pytest.mark.parametrize("args,pattern", [
    (["bogus"], r"bogus"),
    (["Generate", "-p", "hi"], r"Generate"),
    (["--version-of-nothing"], r"--version-of-nothing|command"),
    ([""], r"command"),
])
def test_unknown_command(ouro_bin, args, pattern):
    proc = run(ouro_bin, *args)
    assert_error(proc, 2, r"command", pattern)


def test_no_command(ouro_bin):
    proc = run(ouro_bin)
    assert_error(proc, 2, r"command|usage")


@pytest.mark.parametrize("command", ["generate", "chat", "tokenize", "detokenize", "logits", "bench"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help(ouro_bin, tmp_path, command, flag):
    # --help wins over everything else, even a model that does not exist or a bad flag.
    for extra in ([], ["-m", tmp_path / "nope.gguf", "--bogus"]):
        proc = run(ouro_bin, command, flag, *extra)
        assert_no_crash(proc)
        assert proc.returncode == 0, describe(proc)
        assert proc.stdout.startswith("usage: ouro " + command), describe(proc)
        assert proc.stderr == "", describe(proc)


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["help"]])
def test_top_level_help(ouro_bin, args):
    proc = run(ouro_bin, *args)
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.startswith("usage: ouro"), describe(proc)
    for command in ("generate", "chat", "tokenize", "detokenize", "logits", "bench"):
        assert command in proc.stdout
    assert proc.stderr == ""


@pytest.mark.skipif(engine_allows("avx512"), reason="AVX-512 kernels are allowed here (CPU has them, no OURO_ISA cap)")
def test_isa_unsupported_by_cpu(ouro_bin, model_path):
    proc = run(ouro_bin, "generate", "-p", "hi", "-n", "1", "--isa", "avx512", "-m", model_path)
    assert_error(proc, 2, r"avx512|cpu")


def test_ouro_isa_cap_refuses_higher_families_and_bad_values(ouro_bin, model_path, monkeypatch):
    """OURO_ISA=scalar makes every vector family a usage error naming the setting, and makes auto
    mean scalar; an unknown OURO_ISA value is a usage error naming the variable."""
    monkeypatch.setenv("OURO_ISA", "scalar")
    proc = run(ouro_bin, "generate", "-p", "hi", "-n", "1", "--isa", "avx2", "-m", model_path)
    assert_error(proc, 2, r"OURO_ISA=scalar.*avx2")
    proc = run(ouro_bin, "generate", "-p", "hi", "-n", "1", "--json", "-m", model_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["isa"] == "scalar", describe(proc)
    proc = run(ouro_bin, "microbench", "argmax", "--cols", "64", "--isa", "avx2", "--json")
    assert_error(proc, 2, r"OURO_ISA=scalar.*avx2")
    for bad in ("sse9", "AVX2", " avx2"):
        monkeypatch.setenv("OURO_ISA", bad)
        for args in (["generate", "-p", "hi", "-n", "1", "-m", str(model_path)], ["microbench", "argmax", "--cols", "8"]):
            proc = run(ouro_bin, *args)
            assert_error(proc, 2, r"OURO_ISA")


# ============================================================================================
# logits / detokenize: token ids


@pytest.mark.parametrize("tokens", ["49152", "99999", "1,2,49152", "1073741824", "2147483647", "2147483648",
                                    "99999999999999999999"])
def test_logits_token_out_of_range(ouro_bin, model_path, tokens):
    proc = run(ouro_bin, "logits", "--tokens", tokens, "--json", "-t", "1", "-m", model_path)
    assert_error(proc, 2, r"token|range")


@pytest.mark.parametrize("tokens", ["", ",", "1,,2", "1,", ",1", "a", "1,a", "-1", "1;2", "1 2", "1.5", "0x10",
                                    "[1,2]", "1,-2"])
def test_logits_malformed_tokens(ouro_bin, model_path, tokens):
    proc = run(ouro_bin, "logits", "--tokens", tokens, "--json", "-t", "1", "-m", model_path)
    assert_error(proc, 2, r"token")


def test_logits_token_out_of_range_tiny(ouro_bin, tiny_model):
    n_vocab = len(synth.tiny_vocab()[0])
    ok = run(ouro_bin, "logits", "--tokens", f"0,{n_vocab - 1}", "--json", "-m", tiny_model)
    assert ok.returncode == 0, describe(ok)
    proc = run(ouro_bin, "logits", "--tokens", f"0,{n_vocab}", "--json", "-m", tiny_model)
    assert_error(proc, 2, str(n_vocab))


@pytest.mark.parametrize("ids", ["49152", "1,a", "-1"])
def test_detokenize_bad_ids(ouro_bin, model_path, ids):
    proc = run(ouro_bin, "detokenize", ids, "-m", model_path)
    assert_error(proc, 2, r"token")


def test_logits_out_unwritable(ouro_bin, tiny_model, tmp_path):
    target = tmp_path / "no-such-dir" / "x.npy"
    proc = run(ouro_bin, "logits", "--tokens", "1", "--out", target, "-m", tiny_model)
    assert_error(proc, 1, names=[target])


def test_tokenize_batch_errors(ouro_bin, tiny_model, tmp_path):
    proc = run(ouro_bin, "tokenize", "--batch", tmp_path / "missing.txt", "-m", tiny_model)
    assert_error(proc, 1, names=[tmp_path / "missing.txt"])
    bad = tmp_path / "bad.txt"
    bad.write_text("6869\nzz\n")
    proc = run(ouro_bin, "tokenize", "--batch", bad, "-m", tiny_model)
    assert_error(proc, 2, r"line 2")
    odd = tmp_path / "odd.txt"
    odd.write_text("686\n")
    proc = run(ouro_bin, "tokenize", "--batch", odd, "-m", tiny_model)
    assert_error(proc, 2, r"line 1")


# ============================================================================================
# Resource limits: a small file must not make ouro allocate without bound


def test_huge_metadata_array_under_memory_limit(ouro_bin, tmp_path):
    """A well-formed 12 MB file whose metadata holds a 12M-element u8 array (an unknown key). Loading
    it may succeed or fail cleanly, but under a 1 GiB address-space limit it must not abort with
    std::bad_alloc (the reader keeps each array element as a ~96-byte GgufValue: ~1.2 GB here)."""
    path = synth.write_tiny_llama(tmp_path / "tiny.gguf")
    with open(path, "rb") as f:
        data = f.read()
    L = synth.gguf_layout(data)
    n = 12 << 20
    key = b"ouro.test.blob"
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", VT.ARRAY, VT.UINT8, n) + bytes(n)
    body = data[24:L.tensor_info_start] + kv + data[L.tensor_info_start:L.tensor_info_end]
    header = data[:16] + struct.pack("<Q", L.kv_count + 1)
    head = header + body
    pad = (-len(head)) % L.alignment
    big = tmp_path / "big-array2.gguf"
    big.write_bytes(head + b"\0" * pad + data[L.data_start:])
    ok = run(ouro_bin, "tokenize", "hi", "-m", big)  # unlimited: loads
    assert ok.returncode == 0, describe(ok)
    proc = run(ouro_bin, "tokenize", "hi", "-m", big, limit_as=1 << 30)
    assert_no_crash(proc)
    assert proc.returncode in (0, 1), describe(proc)


@pytest.mark.parametrize("limit_mb", [160, 260, 400])
def test_out_of_memory_is_a_clean_error(ouro_bin, model_path, limit_mb):
    """Under an address-space limit the full 8192-token context (KV cache ~377 MB as f32) or the
    repacked weights may not fit: ouro must then fail with exit 1 and an 'ouro: ' line (docs/cli.md:
    out of memory is a runtime error), not abort."""
    proc = run(ouro_bin, "generate", "-p", "hi", "-n", "2", "--temp", "0", "-t", "1", "--ctx", "8192",
               "-m", model_path, limit_as=limit_mb << 20)
    assert_no_crash(proc)
    if proc.returncode != 0:
        assert_error(proc, 1, r"memory|alloc")


def test_thread_creation_failure_is_a_clean_error(ouro_bin, tiny_model):
    """--threads 1024 (in range) where the threads cannot be created (their stacks exceed a 1 GiB
    address-space limit): a clean error or fewer threads, not std::system_error -> abort."""
    proc = run(ouro_bin, "generate", "-p", "hi", "-n", "2", "--temp", "0", "-t", "1024", "-m", tiny_model,
               limit_as=1 << 30)
    assert_no_crash(proc)
    if proc.returncode != 0:
        assert_error(proc, 1, r"thread")


# ============================================================================================
# Fuzz-ish: random mutations of the tiny model's first 4 KB


def _mutate(data, rng, limit):
    b = bytearray(data)
    kind = rng.choice(["flip", "flip", "byte", "u64", "u32", "truncate", "zero_run", "truncate_and_flip"])
    desc = kind
    if kind in ("flip", "truncate_and_flip"):
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(limit)
            b[i] ^= 1 << rng.randrange(8)
    if kind == "byte":
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(limit)] = rng.choice([0, 1, 0x7F, 0x80, 0xFE, 0xFF, rng.randrange(256)])
    if kind in ("u64", "u32"):
        fmt = "<Q" if kind == "u64" else "<I"
        width = 8 if kind == "u64" else 4
        i = rng.randrange(limit - width)
        v = rng.choice([0, 1, 2, 3, 12, 13, 255, 256, 0x7FFFFFFF, 0xFFFFFFFF, len(data), len(data) + 1,
                        (1 << 62) if width == 8 else 1 << 31, (1 << 64) - 1 if width == 8 else (1 << 32) - 1])
        struct.pack_into(fmt, b, i, v)
        desc += f"@{i}={v}"
    if kind == "zero_run":
        i = rng.randrange(limit)
        n = rng.randint(1, 64)
        b[i:i + n] = bytes(len(b[i:i + n]))
    if kind.startswith("truncate"):
        cut = rng.randrange(limit)
        b = b[:cut]
        desc += f"@{cut}"
    return bytes(b), desc


def test_fuzz_tokenize_mutations(ouro_bin, tiny_bytes, tmp_path):
    rng = random.Random(20240601)
    limit = min(4096, len(tiny_bytes))
    failures = []
    outcomes = {0: 0, 1: 0}
    for i in range(200):
        data, desc = _mutate(tiny_bytes, rng, limit)
        path = tmp_path / f"mut-{i:03d}.gguf"
        path.write_bytes(data)
        try:
            proc = run(ouro_bin, "tokenize", "hi", "-m", path, timeout=10)
        except subprocess.TimeoutExpired:
            failures.append(f"#{i} {desc}: timed out (10 s)  [{path}]")
            continue
        lines = proc.stderr.splitlines()
        ok = proc.returncode in (0, 1) and not any(m in proc.stderr for m in CRASH_MARKERS)
        if proc.returncode == 1:
            ok = ok and len(lines) == 1 and lines[0].startswith("ouro: ") and proc.stdout == ""
        if ok:
            outcomes[proc.returncode] += 1
            path.unlink()
        else:
            failures.append(f"#{i} {desc}: exit {proc.returncode}, stderr {proc.stderr[:300]!r}  [{path}]")
    assert not failures, f"{len(failures)} of 200 mutants misbehaved:\n" + "\n".join(failures)
    assert outcomes[1] > 20, outcomes  # the mutations do reach the parser's error paths


def test_fuzz_generate_mutations(ouro_bin, tiny_bytes, tmp_path):
    """Mutations anywhere in the metadata and tensor infos, run through the whole load + 2 tokens."""
    rng = random.Random(777)
    limit = synth.gguf_layout(tiny_bytes).data_start
    failures = []
    for i in range(100):
        data, desc = _mutate(tiny_bytes, rng, limit)
        path = tmp_path / f"gmut-{i:03d}.gguf"
        path.write_bytes(data)
        try:
            proc = run(ouro_bin, "generate", "-p", "hello there", "-n", "2", "--temp", "0", "-t", "1", "-m", path,
                       timeout=10)
        except subprocess.TimeoutExpired:
            failures.append(f"#{i} {desc}: timed out (10 s)  [{path}]")
            continue
        lines = proc.stderr.splitlines()
        ok = proc.returncode in (0, 1) and not any(m in proc.stderr for m in CRASH_MARKERS)
        if proc.returncode == 1:
            ok = ok and len(lines) == 1 and lines[0].startswith("ouro: ") and proc.stdout == ""
        if ok:
            path.unlink()
        else:
            failures.append(f"#{i} {desc}: exit {proc.returncode}, stderr {proc.stderr[:300]!r}  [{path}]")
    assert not failures, f"{len(failures)} of 100 mutants misbehaved:\n" + "\n".join(failures)
