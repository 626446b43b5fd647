"""Shared fixtures."""

import pytest


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
