"""Test-session settings shared by all test files."""

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_derive_cache(tmp_path_factory):
    """Derived-system caches (theory/cache.py) go to a fresh folder per session, never ~/.cache."""
    old = os.environ.get("TDYN_CACHE_DIR")
    os.environ["TDYN_CACHE_DIR"] = str(tmp_path_factory.mktemp("tdyn-cache"))
    yield
    if old is None:
        os.environ.pop("TDYN_CACHE_DIR", None)
    else:
        os.environ["TDYN_CACHE_DIR"] = old
