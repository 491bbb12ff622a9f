"""Refactors keep the numbers: SmolLM2's logits at every position and greedy continuations, per
kernel family, bit for bit as the engine computed them before the model interface (issue 33).

The fingerprints in bit_identity.json were written by `--record` with the binary of the revision
named there, before the refactor; this test recomputes them with today's binary. A kernel family the
host lacks cannot run here and is skipped (an AVX2-only host checks scalar and avx2). A change that
is meant to move numbers (a new kernel, a new summation order) goes through the lab with its own
correctness criteria and then records new fingerprints, saying so in its commit:

    .venv/bin/python tests/oracle/test_bit_identity.py --record
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ouro_testlib import engine_allows, model_file, ouro_bin_path, run_ouro  # noqa: E402

HERE = Path(__file__).resolve().parent
FINGERPRINTS = HERE / "bit_identity.json"
# Per kernel family: prompts (tests/oracle/prompts.json: short 4, chat 42, code 131 tokens) and
# greedy tokens. The scalar kernels are ~20x slower, so they get the two short prompts.
PLAN = {"scalar": (("short", "chat"), 8), "avx2": (("short", "chat", "code"), 24),
        "avx512": (("short", "chat", "code"), 24)}
ISAS = tuple(PLAN)


def prompt(name: str) -> tuple[str, list[int]]:
    p = json.loads((HERE / "prompts.json").read_text())["prompts"][name]
    return p["text"], p["ids"]


def fingerprint(ouro_bin, model, isa: str) -> dict:
    out = {}
    prompts, n_gen = PLAN[isa]
    with tempfile.TemporaryDirectory() as d:
        for name in prompts:
            text, ids = prompt(name)
            npy = Path(d) / f"{name}.npy"
            run_ouro(ouro_bin, "logits", "--tokens", ",".join(map(str, ids)), "--all", "--out", npy,
                     "--isa", isa, "-t", 2, "--model", model)
            logits = np.load(npy)
            assert logits.shape == (len(ids), 49152) and logits.dtype == np.float32
            gen = json.loads(run_ouro(ouro_bin, "generate", "-p", text, "-n", n_gen,
                                      "--temp", 0, "--json", "--isa", isa, "-t", 2, "--model", model).stdout)
            assert gen["prompt_tokens"] == len(ids)
            out[name] = {"logits_sha256": hashlib.sha256(logits.tobytes()).hexdigest(), "greedy": gen["tokens"]}
    return out


@pytest.mark.parametrize("isa", ISAS)
def test_logits_and_greedy_bit_identical(isa, ouro_bin, model_path):
    if not engine_allows(isa):
        pytest.skip(f"this host has no {isa}")
    want = json.loads(FINGERPRINTS.read_text())["isa"][isa]
    got = fingerprint(ouro_bin, model_path, isa)
    assert sorted(got) == sorted(want), (isa, sorted(got), sorted(want))
    for name in got:
        assert got[name]["greedy"] == want[name]["greedy"], (isa, name)
        assert got[name]["logits_sha256"] == want[name]["logits_sha256"], (
            f"{isa} {name}: logits differ from the fingerprint of {json.loads(FINGERPRINTS.read_text())['revision']}")


def record() -> None:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=HERE).stdout.strip()
    ouro_bin, model = ouro_bin_path(), model_file()
    data = {"revision": rev, "threads": 2, "plan": PLAN,
            "isa": {isa: fingerprint(ouro_bin, model, isa) for isa in ISAS if engine_allows(isa)}}
    FINGERPRINTS.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {FINGERPRINTS} for {', '.join(data['isa'])} at {rev}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: test_bit_identity.py --record")
    record()
