"""Fixtures for the CLI tests.

The binary and model paths have one source of truth, tests/oracle/conftest.py (OURO_BIN,
OURO_TEST_MODEL): this file loads that module under its own name and re-exports its fixtures
(`ouro_bin`, `model_path`) and its `run_ouro` helper, then adds CLI-test fixtures.
"""
import importlib.util
import pathlib
import sys

import pytest

_HERE = pathlib.Path(__file__).resolve().parent
_ORACLE_CONFTEST = _HERE.parent / "oracle" / "conftest.py"


def _load_shared():
    name = "ouro_tests_shared_conftest"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _ORACLE_CONFTEST)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


shared = _load_shared()
ROOT = shared.ROOT
OURO_BIN = shared.OURO_BIN
MODEL = shared.MODEL
run_ouro = shared.run_ouro
ouro_bin = shared.ouro_bin      # fixture (re-exported)
model_path = shared.model_path  # fixture (re-exported)

if str(_HERE) not in sys.path:  # so test modules can `import synth`
    sys.path.insert(0, str(_HERE))

import synth  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A valid tiny llama GGUF (tests/cli/synth.py), written once per session."""
    return pathlib.Path(synth.write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf"))
