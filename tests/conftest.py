"""Test-session settings and fixtures shared by all test files."""

import json
import os
from pathlib import Path

import pytest

#: rows of the speed report (`make bench`): every speed goal against its baseline, recorded
#: (``met``) and never asserted — speed is not a timed assertion in tests
BENCH_ROWS: list[dict] = []


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


@pytest.fixture(scope="session")
def bench_row():
    """``bench_row(name, value, unit, baseline=None, goal=None, met=None, **extra)`` adds one row to
    the speed report that `make bench` prints at the end and saves as JSON (``.benchmarks/speed.json``
    or ``$TDYN_BENCH_JSON``), each row with the machine's 1-minute load average. ``met`` is reported,
    never asserted."""

    def add(name, value, unit, baseline=None, goal=None, met=None, **extra):
        BENCH_ROWS.append({"name": name, "value": float(value), "unit": unit, "baseline": baseline, "goal": goal,
                           "met": None if met is None else bool(met), "loadavg_1m": os.getloadavg()[0], **extra})

    return add


def pytest_terminal_summary(terminalreporter):
    if not BENCH_ROWS:
        return
    lines = [f"{'benchmark':56s} {'value':>10s} {'baseline':>10s}  goal [unit]  met (reported, not asserted)",
             "-" * 100]
    for r in BENCH_ROWS:
        base = "" if r["baseline"] is None else f"{r['baseline']:10.4g}"
        met = "" if r["met"] is None else ("  MET" if r["met"] else "  NOT MET")
        lines.append(f"{r['name']:56s} {r['value']:10.4g} {base:>10s}  {r['goal'] or ''} [{r['unit']}]{met}")
    lines.append(f"load average (1/5/15 min): {os.getloadavg()}, cpus: {os.cpu_count()}")
    terminalreporter.write_sep("=", "speed report")
    terminalreporter.write_line("\n".join(lines))
    out = Path(os.environ.get("TDYN_BENCH_JSON", Path(__file__).resolve().parents[1] / ".benchmarks" / "speed.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": BENCH_ROWS, "loadavg": os.getloadavg(), "cpus": os.cpu_count()}, indent=2))
