"""Progress bars for long work (tqdm): which figure / run / cell is being worked on, with an ETA.

``tdyn reproduce``, ``figures``, ``compare``, ``claims`` and sweeps use it. Bars are written to
stderr and only when it is a terminal; ``--no-progress`` (:func:`enabled` ``(False)``) silences
them. ``TDYN_PROGRESS=always`` shows them even when stderr is not a terminal (logs, tests).

* :func:`bar` — a tqdm bar over an iterable or a total (disabled when quiet); its elapsed time
  keeps ticking while one item takes long.
* :func:`task` — one opaque step (e.g. a paper's compare): elapsed time, and an ETA from the
  duration of the same step last time on this machine (``<cache dir>/timings.json``).
* :func:`enabled` — a context that switches bars on or off for the code below it, including the
  grids of runs of :func:`empirical.sweeps.run_cells` (its ``bar=`` is :func:`cell_bar`).
* :func:`reporting` / :func:`run_children` — progress across processes: a child (``tdyn figures P
  --progress-lines``) writes each of its bars as one line of :data:`PREFIX` + JSON on stderr; the
  parent (``tdyn reproduce --jobs J``) reads them and shows one live bar per child naming the paper,
  the figure or step being made, elapsed time and an ETA (the paper's measured quick time as the
  prior), plus a bar over the papers. Without a terminal the parent shows no bars.
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
from typing import Any

from tqdm.auto import tqdm

__all__ = ["bar", "task", "enabled", "active", "echo", "reporting", "run_children", "PREFIX"]

_ON: contextvars.ContextVar[bool] = contextvars.ContextVar("tdyn_progress", default=True)
#: where bars go as protocol lines (:func:`reporting`); ``None``: drawn by tqdm
_LINES: contextvars.ContextVar[Any] = contextvars.ContextVar("tdyn_progress_lines", default=None)
#: the start of a progress line a child writes on stderr (the rest is JSON; see :class:`_LineBar`)
PREFIX = "@tdyn-progress "


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


class _LineBar(tqdm):
    """A bar written as protocol lines (:data:`PREFIX` + JSON ``{"id", "desc", "n", "total",
    "unit", "postfix"}``, ``{"id", "closed": true}`` at the end) on a stream, for a parent process
    to show (:func:`run_children`); draws nothing itself. Every change is sent (a paper's bars
    change a few hundred times at most: figures, cells)."""

    _ids = iter(range(1 << 62))

    def __init__(self, iterable=None, *, stream, desc="", total=None, unit="it", **_):
        super().__init__(iterable, total=total, desc=desc, unit=unit, disable=True)
        self._stream, self._id, self._postfix_text = stream, next(_LineBar._ids), ""
        self.n, self.unit, self._desc_text, self._done = 0, unit, desc, False
        self._send()

    def _send(self, **extra):
        msg = {"id": self._id, "desc": self._desc_text, "n": self.n, "total": self.total, "unit": self.unit,
               "postfix": self._postfix_text, **extra}
        try:
            self._stream.write(PREFIX + json.dumps(msg) + "\n")
            self._stream.flush()
        except (OSError, ValueError):  # the parent went away: progress only
            pass

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)

    def update(self, n=1):
        self.n += n
        self._send()

    def set_postfix_str(self, s="", refresh=True):
        self._postfix_text = str(s)
        self._send()

    def set_postfix(self, ordered_dict=None, refresh=True, **kwargs):
        items = {**(ordered_dict or {}), **kwargs}
        self.set_postfix_str(", ".join(f"{k}={v}" for k, v in items.items()))

    def set_description(self, desc=None, refresh=True):
        self._desc_text = desc or ""
        self._send()

    set_description_str = set_description

    def refresh(self, *a, **k):
        pass  # every change is sent when made

    def close(self):
        if getattr(self, "_done", True):
            return
        self._done = True
        self._send(closed=True)


def bar(iterable=None, *, total: float | None = None, desc: str = "", unit: str = "it", leave: bool = True,
        position: int | None = None, bar_format: str | None = None) -> tqdm:
    """A progress bar on stderr (a disabled one when :func:`active` is false); use as tqdm:
    iterate, or ``update(n)``, ``set_postfix_str(which)``, ``write(line)``, ``close()``. Under
    :func:`reporting`, a bar sent as protocol lines to the parent process instead."""
    stream = _LINES.get()
    if stream is not None and _ON.get():
        return _LineBar(iterable, stream=stream, desc=desc, total=total, unit=unit)
    return _Bar(iterable, total=total, desc=desc, unit=unit, leave=leave, position=position,
                bar_format=bar_format, disable=not active(), file=sys.stderr, dynamic_ncols=True)


def echo(line: str, err: bool = False) -> None:
    """Print ``line`` on stdout (``err``: stderr) without breaking a bar shown on stderr."""
    tqdm.write(line, file=sys.stderr if err else sys.stdout)


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
    token = _ON.set(bool(on))
    try:
        yield
    finally:
        _ON.reset(token)


def cell_bar(total: int, desc: str):
    """The bar factory a caller hands :func:`empirical.sweeps.run_cells` (``bar=``) to show its
    cells (drawn while :func:`enabled`, on a terminal)."""
    return bar(total=total, desc=desc, unit="cell", leave=False)


@contextmanager
def reporting(stream):
    """Bars below (while :func:`enabled`) are sent to ``stream`` as protocol lines for a parent
    process (:class:`_LineBar`), terminal or not."""
    token = _LINES.set(stream)
    try:
        yield
    finally:
        _LINES.reset(token)


def _clock(seconds: float) -> str:
    seconds = max(int(round(seconds)), 0)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


class _Job:
    """What the parent knows of one child: its bars (by id, in the order opened), start and prior."""

    def __init__(self, name: str, prior: float | None):
        self.name, self.prior, self.start, self.bars = name, prior, time.monotonic(), {}

    def feed(self, msg: dict) -> None:
        if msg.get("closed"):
            self.bars.pop(msg["id"], None)
        else:
            self.bars[msg["id"]] = msg

    def fraction(self) -> float:
        """The fraction of the outer bar (the paper's figures) done (0 before it opens)."""
        top = next(iter(self.bars.values()), None)
        return min(top["n"] / top["total"], 1.0) if top and top.get("total") else 0.0

    def remaining(self) -> float | None:
        """Seconds left: the prior (the paper's measured time) less the time elapsed; once past the
        prior (or without one), extrapolated from the fraction of figures done (``None``: unknown)."""
        elapsed, frac = time.monotonic() - self.start, self.fraction()
        if self.prior and elapsed < self.prior:
            return self.prior - elapsed
        return elapsed * (1 - frac) / frac if frac > 0 else None

    def line(self) -> tuple[float, str]:
        """(fraction done, ``"scb: fig_overlay (fig 2/6) · cells 3/10 cell · 1:23 elapsed, ETA ~2:07"``)."""
        elapsed = time.monotonic() - self.start
        bars = list(self.bars.values())
        parts = []
        if bars:  # the outer bar: the paper's figures (its postfix names the one being made)
            top = bars[0]
            step = top["postfix"] or "starting"  # the postfix names the figure; the desc is the paper
            count = f" ({top['unit']} {top['n'] + 1 if top['total'] and top['n'] < top['total'] else top['n']}" \
                    f"/{top['total']})" if top.get("total") else ""
            parts.append(step + count)
            for inner in bars[1:]:  # what the figure is running now (grids of runs, a compare)
                label = str(inner["desc"]).split(":")[0] or inner["unit"]
                parts.append(f"{label} {inner['n']}/{inner['total']} {inner['unit']}" if inner.get("total") else label)
        else:
            parts.append("starting (loading libraries)")
        left = self.remaining()
        eta = "ETA unknown" if left is None else f"ETA ~{_clock(left)}"
        if left is not None and self.prior and elapsed >= self.prior:
            eta += f" (longer than the usual {_clock(self.prior)})"
        frac = self.fraction() if left is None else elapsed / max(elapsed + left, 1e-9)
        return frac, f"{self.name}: {' · '.join(parts)} · {_clock(elapsed)} elapsed, {eta}"


class _View:
    """The parent's bars: one per running child (:class:`_Job`) and one over all of them, redrawn
    every second by a thread (so that elapsed time and ETA move while a figure takes long)."""

    def __init__(self, names: list[str], priors: dict[str, float], parallel: int):
        self.priors, self.parallel, self.lock = priors, parallel, threading.Lock()
        self.pending, self.jobs, self.slots, self.done = list(names), {}, {}, 0
        self.total = len(names)
        self.overall = bar(total=len(names), desc="papers", unit="paper", position=0, bar_format="{desc}")
        self.on = not self.overall.disable
        self.stop = threading.Event()
        if self.on:
            threading.Thread(target=self._tick, daemon=True).start()

    def start(self, name: str) -> None:
        with self.lock:
            self.pending.remove(name)
            self.jobs[name] = _Job(name, self.priors.get(name))
            if self.on:
                free = next(i for i in range(1, self.parallel + 2) if i not in self.slots.values())
                self.slots[name] = free
                self.jobs[name].bar = bar(total=100, position=free, leave=False, bar_format="{desc}")
        self.draw()

    def feed(self, name: str, line: str) -> bool:
        """A child's stderr line: a progress line updates its job (True); any other line is not ours (False)."""
        if not line.startswith(PREFIX):
            return False
        try:
            msg = json.loads(line[len(PREFIX):])
        except ValueError:
            return False
        with self.lock:
            job = self.jobs.get(name)
            if job is not None:
                job.feed(msg)
        if msg.get("closed") or msg.get("postfix") or msg.get("n") == 0:  # a new step: shown at once
            self.draw()
        return True

    def finish(self, name: str) -> None:
        with self.lock:
            job = self.jobs.pop(name, None)
            self.slots.pop(name, None)
            self.done += 1
            if job is not None and getattr(job, "bar", None) is not None:
                job.bar.close()
        self.draw()

    def _tick(self):
        while not self.stop.wait(1.0):
            self.draw()

    def draw(self) -> None:
        if not self.on:
            return
        with self.lock:
            for job in self.jobs.values():
                frac, text = job.line()
                job.bar.bar_format = "{percentage:3.0f}%|{bar:12}| " + text.replace("{", "{{").replace("}", "}}")
                job.bar.n = round(100 * frac)
                job.bar.refresh()
            # what is left: the running children's ETAs and the pending papers' priors, `parallel` at a time
            running = [j.remaining() or 0.0 for j in self.jobs.values()]
            left = max(max(running, default=0.0),
                       (sum(running) + sum(self.priors.get(n) or 0.0 for n in self.pending)) / self.parallel)
            self.overall.bar_format = (f"papers {self.done}/{self.total} done, {len(self.jobs)} running"
                                       f"{f', ETA ~{_clock(left)}' if left > 0 else ''}")
            self.overall.refresh()

    def close(self) -> None:
        self.stop.set()
        with self.lock:
            for job in self.jobs.values():
                if getattr(job, "bar", None) is not None:
                    job.bar.close()
            self.overall.close()


def run_children(commands: dict[str, list[str]], priors: dict[str, float | None], parallel: int, on_done) -> None:
    """Run ``commands`` (name -> argv; children that report with :func:`reporting`), ``parallel``
    at a time in the given order, under the live view of :class:`_View` (on a terminal only).
    ``on_done(name, completed)`` is called as each finishes, with its stdout and the stderr lines
    that are not progress. Ctrl-C / SIGTERM stops the children still running (the same signal),
    then re-raises."""
    import signal
    import subprocess
    from concurrent.futures import ThreadPoolExecutor, as_completed

    view = _View(list(commands), priors, parallel)
    running: dict[str, subprocess.Popen] = {}
    lock = threading.Lock()
    stopping = threading.Event()

    def run_one(name):
        with lock:
            if stopping.is_set():
                return None
            proc = subprocess.Popen(commands[name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    bufsize=1)
            running[name] = proc
        view.start(name)
        other: list[str] = []

        def read_err():
            for line in proc.stderr:
                if not view.feed(name, line.rstrip("\n")):
                    other.append(line)

        reader = threading.Thread(target=read_err, daemon=True)
        reader.start()
        out = proc.stdout.read()
        proc.wait()
        reader.join()
        with lock:
            running.pop(name, None)
        view.finish(name)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(other))

    pool = ThreadPoolExecutor(max_workers=parallel)
    try:
        futures = {pool.submit(run_one, n): n for n in commands}
        for fut in as_completed(futures):
            res = fut.result()
            if res is not None:
                on_done(futures[fut], res)
    except BaseException as exc:  # Ctrl-C / SIGTERM: stop the children still running, at once
        with lock:
            stopping.set()
            procs = list(running.values())
        pool.shutdown(wait=False, cancel_futures=True)
        sig = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
        for proc in procs:
            proc.send_signal(sig)
        for proc in procs:
            try:
                proc.wait(timeout=8)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise
    finally:
        view.close()
    pool.shutdown(wait=True)
