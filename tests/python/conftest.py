"""Shared fixtures of the Python API tests (run by scripts/test.sh; see python/README.md).

The tests import the `feather` package from wherever Python finds it: the build tree
(PYTHONPATH=build/release/python, as scripts/test.sh sets) or an installed wheel.
"""

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO


@pytest.fixture(scope="session")
def feather_binary() -> pathlib.Path:
    """The `feather` CLI of the same build (FEATHER_BINARY, default build/release/feather)."""
    path = pathlib.Path(os.environ.get("FEATHER_BINARY", REPO / "build" / "release" / "feather"))
    if not path.is_file():
        pytest.skip(f"no feather CLI at {path} (set FEATHER_BINARY)")
    return path
