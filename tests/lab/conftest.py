"""The lab tests' smaller model: SmolLM2's first 8 layers (ouro_testlib.write_first_layers), written
once per session."""
import pytest

from ouro_testlib import model_file, write_first_layers

LAB_LAYERS = 8


@pytest.fixture(scope="session")
def lab_model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("lab-model") / f"SmolLM2-135M-first{LAB_LAYERS}.Q4_1.gguf"
    write_first_layers(model_file(), path, LAB_LAYERS)
    return path
