"""Test-session settings and fixtures shared by all test files."""

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


class _Interrupting:
    """An experiment that raises KeyboardInterrupt when asked for step ``k`` (0-based), i.e. after
    the checkpoint of step ``k`` was written: a real interruption of the same run."""

    def __init__(self, inner, k):
        self._inner, self._k = inner, k

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def step(self, s):
        if s == self._k:
            raise KeyboardInterrupt(f"interrupted before step {s + 1}")
        return self._inner.step(s)


@pytest.fixture
def interrupt_at(monkeypatch):
    """``interrupt_at(k)``: the next ``Trainer.run`` stops with KeyboardInterrupt once ``k`` steps
    are done (later runs are untouched)."""
    from empirical import trainer

    original = trainer.Trainer.run

    def arm(k: int):
        def run(self, experiment, *args, **kwargs):
            monkeypatch.setattr(trainer.Trainer, "run", original)
            return original(self, _Interrupting(experiment, k), *args, **kwargs)

        monkeypatch.setattr(trainer.Trainer, "run", run)

    return arm
