"""Shared fixtures for the oracle tests: where the ouro binary and the default model are."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
OURO_BIN = pathlib.Path(os.environ.get("OURO_BIN", ROOT / "build" / "ouro"))
MODEL = pathlib.Path(os.environ.get("OURO_TEST_MODEL", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.fixture(scope="session")
def ouro_bin():
    if not OURO_BIN.exists():
        pytest.fail(f"ouro binary not found at {OURO_BIN}; build first (make build)")
    return OURO_BIN


@pytest.fixture(scope="session")
def model_path():
    if not MODEL.exists():
        pytest.fail(f"model not found at {MODEL}; run scripts/fetch_model.sh")
    return MODEL


def run_ouro(ouro_bin, *args, check=True, input=None, timeout=300):
    """Runs the ouro binary with args; returns CompletedProcess (text mode)."""
    proc = subprocess.run([str(ouro_bin), *map(str, args)], capture_output=True, text=True,
                          input=input, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"ouro {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr}")
    return proc
