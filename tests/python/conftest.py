"""Fixtures for the Python package's tests (run by ctest: python.*)."""

import os
import shutil

import pytest

import meshstore

BIN = os.environ.get("MESHSTORE_BIN_DIR", os.path.join(os.path.dirname(__file__),
                                                        "..", "..", "build", "bin"))


@pytest.fixture
def store():
    s = meshstore.Store.embedded(num_volumes=2, strategy="controller_colocated")
    yield s
    s.close()


def bin_path(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.skip(f"{name} is not built ({path})")
    return path


def have(program):
    return shutil.which(program) is not None
