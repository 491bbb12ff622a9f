"""The lab tests' smaller model: the default model's first ADVERSARY_LAYERS layers
(ouro_testlib.write_first_layers), written once per session."""
import pytest

from lab_adversaries import ADVERSARY_LAYERS
from ouro_testlib import model_file, write_first_layers


@pytest.fixture(scope="session")
def lab_model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("lab-model") / f"first{ADVERSARY_LAYERS}-layers.gguf"
    write_first_layers(model_file(), path, ADVERSARY_LAYERS)
    return path
