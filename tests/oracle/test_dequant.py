"""Every supported tensor type's scalar dequantization, and the int8 repacking used by the fast
kernels, against the `gguf` package's numpy dequantizer (an independent implementation)."""
import pathlib
import subprocess

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

from blocks import random_blocks

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "build" / "ouro_dequant_tool"

TYPES = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K]
PACKED = {Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K}


CASES = [(t, "ref") for t in TYPES] + [(t, "packed") for t in TYPES if t in PACKED]


@pytest.mark.parametrize("qtype,mode", CASES, ids=[f"{t.name}-{m}" for t, m in CASES])
def test_dequant_matches_gguf_package(qtype, mode):
    if not TOOL.exists():
        pytest.fail(f"{TOOL} missing; build first")
    rng = np.random.default_rng(int(qtype) * 7 + (mode == "packed"))
    block_size, _ = GGML_QUANT_SIZES[qtype]
    cols = 512 if block_size == 256 else 96 if block_size == 32 else 64
    rows = 9
    n_blocks = rows * cols // block_size
    raw, _ = random_blocks(qtype, n_blocks, rng)
    expected = dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(rows, cols)
    proc = subprocess.run([str(TOOL), str(int(qtype)), str(cols), mode], input=raw.tobytes(),
                          capture_output=True, check=True)
    got = np.frombuffer(proc.stdout, dtype=np.float32).reshape(rows, cols)
    # The dequantization formulas are a few float operations per value: a tolerance of a few ulps
    # of the value's magnitude (and of the block's scale for values near zero) suffices, and any
    # layout or bit-field mistake produces errors of the order of the values themselves.
    tol = 4 * np.finfo(np.float32).eps * (np.abs(expected) + np.abs(expected).max())
    bad = np.argwhere(np.abs(got - expected) > tol)
    assert bad.size == 0, f"{len(bad)} mismatches, first at {bad[0]}: got {got[tuple(bad[0])]} want {expected[tuple(bad[0])]}"
