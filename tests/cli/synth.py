"""Synthetic GGUF models for tests: a tiny llama-shaped model, and helpers to break it.

The tiny model is small enough to write in milliseconds and run in well under a second, yet has
every piece the engine reads from a real SmolLM2 GGUF: llama hyper-parameters, a byte-level BPE
vocabulary (all 256 byte tokens spelled GPT-2 byte-level style, some merges, ChatML control tokens),
a ChatML chat template, and F32 weights (random, fixed seed).

Typical use::

    plan = tiny_llama_plan()                 # a ModelPlan: ordered metadata + tensors
    plan.drop_tensor("blk.1.ffn_up.weight")  # ...break one thing...
    plan.write(tmp_path / "bad.gguf")

    write_tiny_llama(tmp_path / "tiny.gguf", n_layer=3, seed=7)   # a valid model, in one call

`gguf_layout(data)` parses a GGUF's header, metadata and tensor infos and returns the byte offset
of every field, for tests that byte-patch files (see `patch_bytes`).
"""
from __future__ import annotations

import dataclasses
import os
import struct
from typing import Any

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

# --------------------------------------------------------------------------------------------
# Vocabulary

CONTROL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as in SmolLM2
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3

# A few merges over byte-level spellings ("Ġ" is the space byte); each merged token's parts exist
# earlier in the list or are single bytes. Order = rank.
MERGES = [
    ("h", "i"), ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("a", "n"), ("Ġ", "a"),
    ("r", "e"), ("o", "n"), ("Ġ", "s"), ("l", "l"), ("Ġ", "w"), ("o", "r"), ("e", "n"), ("Ġ", "h"),
    ("Ġh", "i"), ("e", "s"), ("a", "t"), ("Ġ", "c"), ("i", "s"), ("Ġ", "o"), ("i", "t"), ("Ġ", "b"),
    ("Ġ", "f"), ("o", "u"), ("in", "g"), ("Ġ", "m"), ("a", "r"), ("Ġ", "p"), ("Ġ", "d"), ("e", "d"),
    ("Ġ", "i"), ("Ġa", "n"), ("Ġan", "d"), ("Ġ", "l"), ("e", "l"), ("el", "l"),
    ("ell", "o"),
]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (byte-level BPE spelling)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    """Returns (tokens, token_types, merges as 'a b' strings) of the tiny byte-level BPE vocabulary."""
    b2u = bytes_to_unicode()
    tokens = list(CONTROL_TOKENS)
    types = [TOKEN_TYPE_CONTROL] * len(CONTROL_TOKENS)
    for b in range(256):
        tokens.append(b2u[b])
        types.append(TOKEN_TYPE_NORMAL)
    seen = set(tokens)
    merges = []
    for a, b in MERGES:
        if a + b in seen:
            continue
        assert a in seen and b in seen, (a, b)
        tokens.append(a + b)
        types.append(TOKEN_TYPE_NORMAL)
        seen.add(a + b)
        merges.append(f"{a} {b}")
    return tokens, types, merges


CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# --------------------------------------------------------------------------------------------
# A model as an editable plan


@dataclasses.dataclass
class TensorSpec:
    """One tensor. `data` is float32 (shape in numpy order, i.e. reversed GGUF ne) unless `raw_dtype`
    is set, in which case `data` is the raw uint8 bytes of a quantized tensor of numpy shape `shape`."""
    data: np.ndarray
    raw_dtype: QT | None = None
    shape: tuple[int, ...] | None = None  # numpy order (rows, cols); for raw tensors only

    @property
    def ne(self) -> list[int]:
        shape = self.shape if self.raw_dtype is not None else self.data.shape
        return list(reversed(shape))


@dataclasses.dataclass
class ModelPlan:
    arch: str | None  # general.architecture (None: omit the key); a "general.architecture" entry in kv overrides it
    kv: dict[str, tuple[VT, Any, VT | None]]  # key -> (type, value, array element type)
    tensors: dict[str, TensorSpec]
    alignment: int | None = None  # writes general.alignment when set

    # --- editing helpers ---
    def set_kv(self, key: str, value: Any, vtype: VT | None = None, sub_type: VT | None = None) -> "ModelPlan":
        if vtype is None:
            vtype = self.kv[key][0] if key in self.kv else _guess_type(value)
        if vtype == VT.ARRAY and sub_type is None:
            sub_type = self.kv[key][2] if key in self.kv else _guess_type(value[0])
        self.kv[key] = (vtype, value, sub_type)
        return self

    def drop_kv(self, key: str) -> "ModelPlan":
        del self.kv[key]
        return self

    def drop_tensor(self, name: str) -> "ModelPlan":
        del self.tensors[name]
        return self

    def set_tensor(self, name: str, data: np.ndarray) -> "ModelPlan":
        self.tensors[name] = TensorSpec(np.ascontiguousarray(data, dtype=np.float32))
        return self

    def set_raw_tensor(self, name: str, qtype: QT, shape: tuple[int, ...], seed: int = 0) -> "ModelPlan":
        """Replaces/adds `name` as a tensor of quantized type `qtype` and numpy shape `shape` (rows..., cols),
        filled with random bytes. shape[-1] must be a multiple of the type's block size."""
        block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
        assert shape[-1] % block == 0, f"{qtype.name} needs a row length multiple of {block}"
        byte_shape = (*shape[:-1], shape[-1] // block * nbytes)
        rng = np.random.default_rng(seed)
        raw = rng.integers(0, 256, size=byte_shape, dtype=np.uint8)
        self.tensors[name] = TensorSpec(raw, raw_dtype=qtype, shape=tuple(shape))
        return self

    def quantize(self, qtype: QT, names: list[str] | None = None) -> "ModelPlan":
        """Quantizes the 2-D float tensors (all of them, or `names`) to qtype with gguf.quants
        (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, ...; the row length must be a multiple of the block size)."""
        from gguf import quants
        for name, ts in list(self.tensors.items()):
            if ts.raw_dtype is not None or ts.data.ndim != 2 or (names is not None and name not in names):
                continue
            raw = quants.quantize(ts.data, qtype)
            self.tensors[name] = TensorSpec(raw, raw_dtype=qtype, shape=tuple(ts.data.shape))
        if names is None:
            self.kv["general.file_type"] = (VT.UINT32, {QT.Q4_0: 2, QT.Q4_1: 3, QT.Q8_0: 7}.get(qtype, 0), None)
        return self

    def write(self, path: str | os.PathLike) -> str:
        return write_gguf(self, path)


def _guess_type(v: Any) -> VT:
    if isinstance(v, bool):
        return VT.BOOL
    if isinstance(v, int):
        return VT.UINT32
    if isinstance(v, float):
        return VT.FLOAT32
    if isinstance(v, str):
        return VT.STRING
    if isinstance(v, (list, tuple)):
        return VT.ARRAY
    raise TypeError(f"cannot guess the GGUF type of {v!r}")


def tiny_llama_plan(n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128,
                    n_ctx: int = 256, seed: int = 0, tied_output: bool = False, rope_base: float = 10000.0,
                    rms_eps: float = 1e-5, eos_token_id: int = 2, bos_token_id: int = 1,
                    scale: float = 0.05) -> ModelPlan:
    """A valid tiny llama model as an editable plan (F32 weights, N(0, scale) with a fixed seed)."""
    tokens, types, merges = tiny_vocab()
    n_vocab = len(tokens)
    head_dim = n_embd // n_head
    kv: dict[str, tuple[VT, Any, VT | None]] = {}

    def put(key, vtype, value, sub=None):
        kv[key] = (vtype, value, sub)

    put("general.name", VT.STRING, "ouro-tiny-test")
    put("llama.block_count", VT.UINT32, n_layer)
    put("llama.context_length", VT.UINT32, n_ctx)
    put("llama.embedding_length", VT.UINT32, n_embd)
    put("llama.feed_forward_length", VT.UINT32, n_ff)
    put("llama.attention.head_count", VT.UINT32, n_head)
    put("llama.attention.head_count_kv", VT.UINT32, n_head_kv)
    put("llama.rope.freq_base", VT.FLOAT32, rope_base)
    put("llama.attention.layer_norm_rms_epsilon", VT.FLOAT32, rms_eps)
    put("llama.vocab_size", VT.UINT32, n_vocab)
    put("llama.rope.dimension_count", VT.UINT32, head_dim)
    put("general.file_type", VT.UINT32, 0)  # all F32
    put("tokenizer.ggml.model", VT.STRING, "gpt2")
    put("tokenizer.ggml.pre", VT.STRING, "smollm")
    put("tokenizer.ggml.tokens", VT.ARRAY, tokens, VT.STRING)
    put("tokenizer.ggml.token_type", VT.ARRAY, types, VT.INT32)
    put("tokenizer.ggml.merges", VT.ARRAY, merges, VT.STRING)
    put("tokenizer.ggml.bos_token_id", VT.UINT32, bos_token_id)
    put("tokenizer.ggml.eos_token_id", VT.UINT32, eos_token_id)
    put("tokenizer.ggml.add_bos_token", VT.BOOL, False)
    put("tokenizer.chat_template", VT.STRING, CHATML_TEMPLATE)

    rng = np.random.default_rng(seed)

    def mat(rows, cols):
        return TensorSpec((rng.standard_normal((rows, cols)) * scale).astype(np.float32))

    def norm():
        return TensorSpec((1.0 + 0.1 * rng.standard_normal(n_embd)).astype(np.float32))

    q_dim, kv_dim = n_head * head_dim, n_head_kv * head_dim
    t: dict[str, TensorSpec] = {}
    t["token_embd.weight"] = mat(n_vocab, n_embd)
    t["output_norm.weight"] = norm()
    if not tied_output:
        t["output.weight"] = mat(n_vocab, n_embd)
    for layer in range(n_layer):
        p = f"blk.{layer}."
        t[p + "attn_norm.weight"] = norm()
        t[p + "attn_q.weight"] = mat(q_dim, n_embd)
        t[p + "attn_k.weight"] = mat(kv_dim, n_embd)
        t[p + "attn_v.weight"] = mat(kv_dim, n_embd)
        t[p + "attn_output.weight"] = mat(n_embd, q_dim)
        t[p + "ffn_norm.weight"] = norm()
        t[p + "ffn_gate.weight"] = mat(n_ff, n_embd)
        t[p + "ffn_up.weight"] = mat(n_ff, n_embd)
        t[p + "ffn_down.weight"] = mat(n_embd, n_ff)
    return ModelPlan(arch="llama", kv=kv, tensors=t)


def write_gguf(plan: ModelPlan, path: str | os.PathLike) -> str:
    """Writes the plan as a GGUF v3 file (general.architecture first, then plan.kv in order)."""
    path = os.fspath(path)
    w = gguf.GGUFWriter(path, plan.arch if plan.arch is not None else "")
    if plan.arch is None or "general.architecture" in plan.kv:
        # plan.arch None: no general.architecture at all; a plan.kv entry: that value/type instead.
        w.kv_data[0].pop("general.architecture", None)
    if plan.alignment is not None:  # any value, even one GGUFWriter.add_custom_alignment would refuse
        w.data_alignment = plan.alignment
        w.add_uint32("general.alignment", plan.alignment)
    for key, (vtype, value, sub) in plan.kv.items():
        if vtype == VT.ARRAY:
            w.add_key_value(key, list(value), VT.ARRAY, sub_type=sub)
        else:
            w.add_key_value(key, value, vtype)
    for name, ts in plan.tensors.items():
        if ts.raw_dtype is None:
            w.add_tensor(name, ts.data)
        else:
            w.add_tensor(name, ts.data, raw_dtype=ts.raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_llama(path: str | os.PathLike, **kw) -> str:
    """Writes a valid tiny llama GGUF (see tiny_llama_plan for the keyword arguments)."""
    return tiny_llama_plan(**kw).write(path)


# --------------------------------------------------------------------------------------------
# Byte layout of a GGUF file, for byte-patching tests

_SCALAR = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
           VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d"}


@dataclasses.dataclass
class KvLayout:
    key: str
    start: int        # offset of the key's length field
    type_offset: int  # offset of the u32 value type
    value_offset: int
    end: int
    vtype: int
    elem_type_offset: int | None = None  # arrays: offset of the u32 element type
    count_offset: int | None = None      # arrays: offset of the u64 length


@dataclasses.dataclass
class TensorInfoLayout:
    name: str
    start: int  # offset of the name's length field
    n_dims_offset: int
    ne_offsets: list[int]
    type_offset: int
    offset_offset: int
    end: int
    ne: list[int]
    ggml_type: int
    rel_offset: int


@dataclasses.dataclass
class GgufLayout:
    version: int
    tensor_count: int
    kv_count: int
    kvs: list[KvLayout]
    tensors: list[TensorInfoLayout]
    kv_start: int
    tensor_info_start: int
    tensor_info_end: int
    alignment: int
    data_start: int

    def kv(self, key: str) -> KvLayout:
        return next(k for k in self.kvs if k.key == key)

    def tensor(self, name: str) -> TensorInfoLayout:
        return next(t for t in self.tensors if t.name == name)


MAGIC_OFFSET, VERSION_OFFSET, TENSOR_COUNT_OFFSET, KV_COUNT_OFFSET, HEADER_END = 0, 4, 8, 16, 24


def gguf_layout(data: bytes) -> GgufLayout:
    """Parses a well-formed GGUF (v2/v3) and returns the offsets of its fields."""
    mv = memoryview(data)
    pos = 0

    def rd(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, mv, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def rd_str():
        n = rd("<Q")
        nonlocal pos
        s = bytes(mv[pos:pos + n]).decode("utf-8", errors="replace")
        pos += n
        return s

    def skip_value(vt):
        nonlocal pos
        if vt == VT.STRING:
            rd_str()
        elif vt == VT.ARRAY:
            et = rd("<I")
            n = rd("<Q")
            if et in _SCALAR:
                pos += n * struct.calcsize(_SCALAR[VT(et)])
            else:
                for _ in range(n):
                    skip_value(VT(et))
        else:
            pos += struct.calcsize(_SCALAR[VT(vt)])

    assert bytes(mv[0:4]) == b"GGUF", "not a GGUF file"
    pos = 4
    version = rd("<I")
    n_tensors = rd("<Q")
    n_kv = rd("<Q")
    kvs = []
    alignment = 32
    for _ in range(n_kv):
        start = pos
        key = rd_str()
        type_off = pos
        vt = rd("<I")
        value_off = pos
        elem_off = count_off = None
        if vt == VT.ARRAY:
            elem_off, count_off = pos, pos + 4
        if key == "general.alignment":
            alignment = struct.unpack_from(_SCALAR[VT(vt)], mv, pos)[0]
        skip_value(VT(vt))
        kvs.append(KvLayout(key, start, type_off, value_off, pos, vt, elem_off, count_off))
    ti_start = pos
    tensors = []
    for _ in range(n_tensors):
        start = pos
        name = rd_str()
        nd_off = pos
        nd = rd("<I")
        ne_offs, ne = [], []
        for _ in range(nd):
            ne_offs.append(pos)
            ne.append(rd("<Q"))
        type_off = pos
        tt = rd("<I")
        off_off = pos
        rel = rd("<Q")
        tensors.append(TensorInfoLayout(name, start, nd_off, ne_offs, type_off, off_off, pos, ne, tt, rel))
    ti_end = pos
    data_start = (pos + alignment - 1) // alignment * alignment
    return GgufLayout(version, n_tensors, n_kv, kvs, tensors, HEADER_END, ti_start, ti_end, alignment, data_start)


def gguf_layout_of_file(path: str | os.PathLike, max_header_bytes: int = 64 << 20) -> GgufLayout:
    """gguf_layout of a file on disk, reading only its first max_header_bytes (not the tensor data)."""
    with open(path, "rb") as f:
        head = f.read(max_header_bytes)
    return gguf_layout(head)


def patch_bytes(data: bytes, offset: int, fmt: str, value) -> bytes:
    """Returns data with struct-packed `value` written at offset (e.g. fmt '<Q' for a u64)."""
    b = bytearray(data)
    struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def write_prefix(src: str | os.PathLike, dst: str | os.PathLike, n: int, chunk: int = 1 << 20) -> str:
    """Copies the first n bytes of src to dst (a truncated copy) without reading the rest."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        left = n
        while left > 0:
            b = fi.read(min(chunk, left))
            if not b:
                break
            fo.write(b)
            left -= len(b)
    return os.fspath(dst)
