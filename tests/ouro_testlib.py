"""Where the ouro binary and the default model are, and how tests run the binary. Imported by
tests/conftest.py (the fixtures) and by test modules (`from ouro_testlib import run_ouro`)."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
OURO_BIN = pathlib.Path(os.environ.get("OURO_BIN", ROOT / "build" / "ouro"))
MODEL = pathlib.Path(os.environ.get("OURO_TEST_MODEL", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))


def ouro_bin_path():
    if not OURO_BIN.exists():
        pytest.fail(f"ouro binary not found at {OURO_BIN}; build first (make build)")
    return OURO_BIN


def model_file():
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
