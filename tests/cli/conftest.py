"""Fixtures for the CLI tests (the binary and model fixtures come from tests/conftest.py)."""
import pathlib
import sys

import pytest

_HERE = pathlib.Path(__file__).resolve().parent
if str(_HERE) not in sys.path:  # so test modules can `import synth`
    sys.path.insert(0, str(_HERE))

import synth  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A valid tiny llama GGUF (tests/cli/synth.py), written once per session."""
    return pathlib.Path(synth.write_tiny_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf"))
