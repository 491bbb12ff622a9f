"""Fixtures shared by every test directory (pytest loads this file first for all of tests/)."""
import pytest

from ouro_testlib import model_file, ouro_bin_path


@pytest.fixture(scope="session")
def ouro_bin():
    return ouro_bin_path()


@pytest.fixture(scope="session")
def model_path():
    return model_file()
