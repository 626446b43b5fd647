"""Progress bars for long work (tqdm): which figure / run / cell is being worked on, with an ETA.

``tdyn reproduce``, ``figures``, ``compare``, ``claims`` and sweeps use it. Bars are written to
stderr and only when it is a terminal; ``--no-progress`` (:func:`enabled` ``(False)``) silences
them. ``TDYN_PROGRESS=always`` shows them even when stderr is not a terminal (logs, tests).

* :func:`bar` — a tqdm bar over an iterable or a total (disabled when quiet); its elapsed time
  keeps ticking while one item takes long.
* :func:`task` — one opaque step (e.g. a paper's compare): elapsed time, and an ETA from the
  duration of the same step last time on this machine (``<cache dir>/timings.json``).
* :func:`enabled` — a context that switches bars on or off for the code below it, including the
  grids of runs of :func:`empirical.sweeps.run_cells` (through its ``cell_progress`` hook).
"""

from __future__ import annotations

import contextvars
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from tqdm.auto import tqdm

__all__ = ["bar", "task", "enabled", "active", "echo"]

_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("tdyn_progress", default=True)


def active() -> bool:
    """Whether bars are shown here: switched on (:func:`enabled`) and stderr is a terminal (or
    ``TDYN_PROGRESS=always``)."""
    if not _ON.get():
        return False
    return os.environ.get("TDYN_PROGRESS") == "always" or bool(getattr(sys.stderr, "isatty", lambda: False)())


class _Ticker:
    """Refreshes a bar once a second so that its elapsed time and ETA move during a long item."""

    def __init__(self, bar, every: float = 1.0):
        self.bar, self.every, self.stop = bar, every, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.wait(self.every):
            try:
                self.bar.refresh()
            except Exception:  # noqa: BLE001 - a closed bar; nothing to show
                return

    def close(self):
        self.stop.set()


class _Bar(tqdm):
    """tqdm with a ticker (see :class:`_Ticker`) while shown."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ticker = None if self.disable else _Ticker(self)

    def close(self):
        if getattr(self, "_ticker", None) is not None:
            self._ticker.close()
        super().close()


def bar(iterable=None, *, total: float | None = None, desc: str = "", unit: str = "it", leave: bool = True,
        position: int | None = None, bar_format: str | None = None) -> tqdm:
    """A progress bar on stderr (a disabled one when :func:`active` is false); use as tqdm:
    iterate, or ``update(n)``, ``set_postfix_str(which)``, ``write(line)``, ``close()``."""
    return _Bar(iterable, total=total, desc=desc, unit=unit, leave=leave, position=position,
                bar_format=bar_format, disable=not active(), file=sys.stderr, dynamic_ncols=True)


def echo(line: str) -> None:
    """Print ``line`` on stdout without breaking a bar shown on stderr."""
    tqdm.write(line, file=sys.stdout)


def _timings_path() -> Path:
    from theory.cache import cache_dir

    return cache_dir() / "timings.json"


def _expected(key: str) -> float | None:
    try:
        return float(json.loads(_timings_path().read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record(key: str, seconds: float) -> None:
    path = _timings_path()
    try:
        table = json.loads(path.read_text()) if path.exists() else {}
        table[key] = round(float(seconds), 3)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except (OSError, ValueError):
        pass  # timings only feed the ETA


@contextmanager
def task(desc: str, key: str | None = None):
    """``with task("compare scb (quick)"):`` — a bar for one opaque step, counting seconds; its
    total (hence the ETA) is the step's duration last time (``key``, default ``desc``), recorded
    when the step completes."""
    key = key or desc
    expected = _expected(key)
    b = bar(total=round(expected, 1) if expected else None, desc=desc, unit="s", leave=False,
            bar_format=("{desc}: {percentage:3.0f}%|{bar}| {elapsed} elapsed, ETA {remaining} (from the last run)"
                        if expected else "{desc}: {elapsed} elapsed"))
    start = time.perf_counter()
    stop = threading.Event()

    def count():  # the bar's n follows the wall clock, so tqdm's ETA is expected - elapsed
        while not stop.wait(1.0):
            b.n = min(round(time.perf_counter() - start, 1), b.total or float("inf"))

    counter = None if b.disable else threading.Thread(target=count, daemon=True)
    if counter is not None:
        counter.start()
    try:
        yield b
    finally:
        stop.set()
        b.close()
    _record(key, time.perf_counter() - start)


@contextmanager
def enabled(on: bool = True):
    """Bars on (still only on a terminal) or off for the block, sweeps of runs included."""
    from empirical.sweeps import cell_progress

    token = _ON.set(bool(on))
    hook = cell_progress.set(_cell_bar if on else None)
    try:
        yield
    finally:
        cell_progress.reset(hook)
        _ON.reset(token)


def _cell_bar(total: int, desc: str):
    """The bar :func:`empirical.sweeps.run_cells` drives over its cells (see ``cell_progress``)."""
    return bar(total=total, desc=desc, unit="cell", leave=False)
