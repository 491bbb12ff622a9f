"""Random but valid GGML blocks for tests (finite scales)."""
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES


def random_blocks(qtype, n_blocks, rng, scale=2.0):
    """Random block bytes of a GGML type whose f16 scale fields are finite, in [-scale, scale]."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)

    def f16_field(offset):
        vals = rng.uniform(-scale, scale, size=n_blocks).astype(np.float16)
        raw[:, offset:offset + 2] = vals.view(np.uint8).reshape(n_blocks, 2)

    if qtype == Q.F32:
        raw = rng.standard_normal(n_blocks).astype(np.float32).view(np.uint8).reshape(n_blocks, 4)
    elif qtype == Q.F16:
        raw = rng.standard_normal(n_blocks).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    elif qtype == Q.BF16:
        f = rng.standard_normal(n_blocks).astype(np.float32).view(np.uint32)
        raw = (f >> 16).astype(np.uint16).view(np.uint8).reshape(n_blocks, 2)
    elif qtype in (Q.Q8_0, Q.Q4_0):
        f16_field(0)
    elif qtype == Q.Q4_1:
        f16_field(0)
        f16_field(2)
    elif qtype == Q.Q4_K:
        f16_field(0)
        f16_field(2)
    elif qtype == Q.Q6_K:
        f16_field(type_size - 2)
    return raw, block_size
