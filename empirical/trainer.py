"""The Trainer: device, seeds, progress, observable logging, checkpoints, divergence detection.

A paper's experiment is an object with this interface (see ``empirical/scb/experiment.py``):

* ``paper``, ``name``: strings for the trajectory's attributes;
* ``config``: the run's Config — the **one place time lives**: the Trainer runs ``config.steps``
  steps, logs at ``config.log_steps()`` and stamps each row with ``config.ode_time(step)``;
* ``setup(device, generator)``: build model/optimiser state on ``device``; draw randomness only
  from ``generator`` (a seeded ``torch.Generator`` on that device) so same seed -> same numbers;
* ``step(step) -> dict[str, float]``: one optimisation step (``step`` counts from 0); returns
  scalars such as the minibatch loss;
* ``observables() -> dict[str, float]``: the theory's observables, under the theory's names;
* ``state_dict()`` / ``load_state_dict(d)``: for checkpoints;
* ``parameters_info() -> dict`` (optional): derived quantities (not config fields) recorded as the
  trajectory's ``parameter_values`` attribute.

``Trainer.run`` logs observables at the config's ``log_steps()`` (step 0 and the last step included) into
a Trajectory with the same layout as ODE solves. NaN/Inf in the step's scalars or observables
raises :class:`DivergenceError` carrying the partial trajectory.

Checkpoints (``checkpoint=`` a file, or a directory holding ``checkpoint.pt`` and a readable
``checkpoint.json``) store the experiment's state, every RNG state, the rows logged so far and a
**fingerprint** (paper, experiment, seed, steps, logging grid, the full config, code version);
``checkpoint.json`` also records the step reached (``step``) and the last logged step. They are
written every ``checkpoint_every`` (:func:`parse_every`: steps, or seconds such as ``"60s"`` — the
default, so that saving costs a few per cent at most; 0: at every logging step), at the last step
and when the run is interrupted. Resuming from a checkpoint whose fingerprint differs is
``ConfigError("resume", ...)``: a run is never silently mixed with another one.
Interrupted-then-resumed equals uninterrupted, bit for bit.

**Interrupts.** SIGINT (Ctrl-C) or SIGTERM during the steps stops the run at the end of the
current step (a second signal stops it at once): the checkpoint, if any, is saved at that step and
:class:`TrainingInterrupted` is raised carrying the trajectory logged so far (``partial``), so
the caller can keep it (``tdyn train`` writes ``FILE.partial.nc`` and says how to resume).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from simulate.trajectory import atomic_write, code_version, jsonable, make_trajectory
from theory.errors import ConfigError, DivergenceError

__all__ = ["Trainer", "Experiment", "ModuleState", "resolve_device", "stack_runs", "torch_threads",
           "checkpoint_paths", "read_fingerprint", "fingerprint_mismatch", "checkpoint_problem", "parse_every", "TrainingInterrupted",
           "DEFAULT_CHECKPOINT_EVERY"]

#: checkpoint interval when none is given: a time interval, so that saving stays a small cost
DEFAULT_CHECKPOINT_EVERY = "60s"
#: what ``checkpoint.json`` records beside the fingerprint (not compared on resume)
_PROGRESS_KEYS = ("step", "last_logged_step")


def parse_every(value: int | float | str | None) -> tuple[str, float]:
    """A checkpoint interval: ``None`` -> the default (:data:`DEFAULT_CHECKPOINT_EVERY`); ``0`` ->
    ``("log", 0)`` (every logging step); ``500`` or ``"500"`` -> ``("steps", 500)``; ``"60s"``,
    ``"5m"``, ``"1h"`` -> ``("seconds", 60 / 300 / 3600)``. Anything else is
    ``ConfigError("checkpoint_every", ...)``."""
    if value is None:
        value = DEFAULT_CHECKPOINT_EVERY
    if isinstance(value, bool):
        raise ConfigError("checkpoint_every", f"must be steps (e.g. 500) or a time (e.g. 60s), got {value!r}")
    if isinstance(value, (int, np.integer)):
        if value < 0:
            raise ConfigError("checkpoint_every", f"must be >= 0 steps, got {value}")
        return ("log", 0.0) if value == 0 else ("steps", float(value))
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(s|sec|m|min|h)?\s*", str(value))
    if m is None or (m.group(2) is None and "." in m.group(1)):
        raise ConfigError("checkpoint_every", f"must be steps (e.g. 500) or a time (e.g. 60s, 5m), got {value!r}")
    number, unit = float(m.group(1)), m.group(2)
    if unit is None:
        return parse_every(int(number))
    if number <= 0:
        raise ConfigError("checkpoint_every", f"a time interval must be > 0, got {value!r}")
    return "seconds", number * {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[unit]


class TrainingInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM stopped :meth:`Trainer.run` at the end of step ``step``. ``partial`` is the
    trajectory logged so far (status 1); ``checkpoint`` the checkpoint saved at ``step`` (or
    None when the run had none); ``signum`` the signal."""

    def __init__(self, signum: int, step: int, partial: Any = None, checkpoint: str | None = None):
        self.signum, self.step, self.partial, self.checkpoint = int(signum), int(step), partial, checkpoint
        super().__init__(f"stopped by {signal.Signals(self.signum).name} at step {self.step}")


@contextmanager
def _deferred_signals():
    """Within the block (main thread only), SIGINT/SIGTERM are noted in the yielded list instead of
    raising, so the training loop can stop at a step boundary; a second one raises at once. A signal
    the process was started with ignored (``nohup``, a background job) stays ignored."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    def note(signum, frame):
        if caught:  # asked twice: stop now
            raise KeyboardInterrupt
        caught.append(signum)

    old = {sig: signal.signal(sig, note) for sig in (signal.SIGINT, signal.SIGTERM)
           if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield caught
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def torch_threads(n: int | None = 1):
    """Run torch on ``n`` intra-op CPU threads, restoring the previous setting afterwards
    (``None``: leave it). The papers' models are small: intra-op threads only add
    synchronisation, and on a loaded 2-core machine 2 threads ran training 10-20x slower than 1."""
    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class Experiment(Protocol):
    paper: str
    name: str
    config: Any  # steps, log_steps(), ode_time(step), seed

    def setup(self, device: torch.device, generator: torch.Generator) -> None: ...
    def step(self, step: int) -> dict[str, float]: ...
    def observables(self) -> dict[str, float]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ModuleState:
    """Checkpoint state for experiments that keep their network in ``self.model`` and, optionally,
    an optimiser in ``self.opt`` (anything with ``state_dict``/``load_state_dict``)."""

    def state_dict(self) -> dict[str, Any]:
        state = {"model": self.model.state_dict()}
        if getattr(self, "opt", None) is not None:
            state["opt"] = self.opt.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if "opt" in state:
            self.opt.load_state_dict(state["opt"])


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` -> cuda when available, else cpu. Asking for cuda without a GPU is a ConfigError."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device", "cuda requested but no GPU is available (use --device cpu or auto)")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise ConfigError("device", f"must be auto, cpu or cuda[:i], got {device!r}")
    return torch.device(device)


def checkpoint_paths(checkpoint: str | os.PathLike) -> tuple[Path, Path]:
    """``(state file, fingerprint JSON)`` of a checkpoint given as a directory (no suffix, or an
    existing directory: ``DIR/checkpoint.pt``) or as a file (``FILE`` and ``FILE.json``)."""
    p = Path(checkpoint)
    if p.is_dir() or not p.suffix:
        return p / "checkpoint.pt", p / "checkpoint.json"
    return p, p.with_name(p.name + ".json")


def read_fingerprint(checkpoint: str | os.PathLike) -> dict[str, Any] | None:
    """The fingerprint stored beside a checkpoint (``None`` if there is no checkpoint yet).
    A checkpoint without a readable fingerprint is ``ConfigError("resume", ...)``."""
    state, meta = checkpoint_paths(checkpoint)
    if not state.exists():
        return None
    try:
        saved = json.loads(meta.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError("resume", f"checkpoint {state} has no readable fingerprint ({meta}): {err}") from None
    return {k: v for k, v in saved.items() if k not in _PROGRESS_KEYS}


def checkpoint_problem(state: str | os.PathLike) -> str | None:
    """Why the checkpoint file ``state`` cannot be resumed (``None`` when it can): it must be the
    zip archive ``torch.save`` writes, every member intact (CRC-checked). Reads the file once;
    loads nothing."""
    import zipfile

    state = Path(state)
    if not state.is_file():
        return "missing" if not state.exists() else "not a file"
    try:
        if not zipfile.is_zipfile(state):
            return "truncated, or not a file torch.save wrote"
        with zipfile.ZipFile(state) as z:
            bad = z.testzip()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as err:
        return "unreadable: " + " ".join(f"{type(err).__name__}: {err}".split())[:200]
    return None if bad is None else f"corrupted member {bad}"


def fingerprint_mismatch(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    """A one-line description of how two fingerprints differ (``None`` when they match)."""
    diffs = []
    sc, cc = saved.get("config") or {}, current.get("config") or {}
    for k in sorted(set(sc) | set(cc)):
        if sc.get(k) != cc.get(k):
            diffs.append(f"{k} {sc.get(k)!r} -> {cc.get(k)!r}")
    for k in sorted(set(saved) | set(current)):
        if k != "config" and saved.get(k) != current.get(k):
            diffs.append(f"{k} {saved.get(k)!r} -> {current.get(k)!r}")
    return None if not diffs else "checkpoint was written by a different run: " + ", ".join(diffs[:6])


@dataclass
class Trainer:
    """Runs an Experiment. ``checkpoint`` (a directory or file, see :func:`checkpoint_paths`) is
    written atomically every ``checkpoint_every`` (:func:`parse_every`: steps such as ``500``, a
    time such as ``"60s"``, 0 for every logging step; ``None``: every 60 s), at the last step and on
    an interrupt; with ``resume=True`` a run restarts from it (after checking its fingerprint) and
    produces the same numbers as an uninterrupted run."""

    device: str = "auto"
    #: the run's seed (``None``: the config's ``seed``)
    seed: int | None = None
    progress: bool = False
    checkpoint: str | os.PathLike | None = None
    checkpoint_every: int | float | str | None = None
    resume: bool = False
    #: CPU threads for torch during the run (see :func:`torch_threads`); ``None`` keeps torch's.
    cpu_threads: int | None = 1

    def _seed(self, experiment) -> int:
        return int(experiment.config.seed if self.seed is None else self.seed)

    def fingerprint(self, experiment, steps: int, log_steps) -> dict[str, Any]:
        """What must match for a checkpoint to be resumed (JSON-able)."""
        grid = hashlib.sha256(np.asarray(sorted(log_steps), dtype=np.int64).tobytes()).hexdigest()[:16]
        return {"paper": experiment.paper, "experiment": experiment.name, "seed": self._seed(experiment),
                "steps": int(steps), "log_steps": grid, "config": jsonable(experiment.config.to_dict()),
                "code_version": code_version()}

    def run(self, experiment: Experiment, *, stop_when=None):
        """Train for ``experiment.config.steps`` steps, logging at ``config.log_steps()`` (0 and the
        last step included) with times ``config.ode_time(step)``. ``stop_when(obs) -> bool``
        (optional) ends the run early at a logging point (e.g. once a correlation threshold is
        reached)."""
        with torch_threads(self.cpu_threads), _deferred_signals() as caught:
            return self._run(experiment, stop_when, caught)

    def _run(self, experiment, stop_when, caught=()):
        config = experiment.config
        every_kind, every = parse_every(self.checkpoint_every)
        steps = int(config.steps)
        log_at = {int(s) for s in config.log_steps()}
        if 0 not in log_at or steps not in log_at or max(log_at) > steps:
            raise ConfigError("log_steps", f"must contain 0 and {steps} and lie within [0, {steps}]")
        dev = resolve_device(self.device)
        seed = self._seed(experiment)
        torch.manual_seed(seed)
        gen = torch.Generator(device=dev)
        gen.manual_seed(seed)
        experiment.setup(dev, gen)

        rows: list[dict[str, float]] = []
        times: list[float] = []
        steps_logged: list[int] = []
        start = 0
        fp = self.fingerprint(experiment, steps, sorted(log_at))
        ckpt, meta = checkpoint_paths(self.checkpoint) if self.checkpoint else (None, None)
        if self.resume and ckpt is not None and ckpt.exists():
            why = fingerprint_mismatch(read_fingerprint(self.checkpoint), fp)
            if why:
                raise ConfigError("resume", why)
            why = checkpoint_problem(ckpt)
            try:
                state = torch.load(ckpt, map_location=dev, weights_only=False) if why is None else None
            except Exception as err:  # noqa: BLE001 - a damaged file is the user's to remove
                why = "unreadable: " + " ".join(f"{type(err).__name__}: {err}".split())[:200]
            if why is not None:
                raise ConfigError("resume", f"checkpoint {ckpt} is damaged ({why}); remove it to start the run "
                                            "again") from None
            try:
                experiment.load_state_dict(state["experiment"])
            except (RuntimeError, KeyError, ValueError) as err:
                raise ConfigError("resume", f"checkpoint {ckpt} does not fit this experiment: "
                                            f"{' '.join(str(err).split())[:200]}") from None
            gen.set_state(state["generator"].to("cpu") if dev.type == "cpu" else state["generator"])
            _set_global_rng(state.get("rng"))
            rows, times, steps_logged, start = state["rows"], state["times"], state["steps"], state["step"]

        def save_checkpoint(done: int):
            state = {"experiment": experiment.state_dict(), "generator": gen.get_state(), "rng": _global_rng(),
                     "rows": rows, "times": times, "steps": steps_logged, "step": done}
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            info = {**fp, "step": int(done), "last_logged_step": int(steps_logged[-1]) if steps_logged else None}
            atomic_write(meta, lambda tmp: Path(tmp).write_text(json.dumps(info, sort_keys=True)))
            atomic_write(ckpt, lambda tmp: torch.save(state, tmp))
            return time.monotonic()

        def log(step: int, extra: dict[str, float]):
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # NaN/Inf reported below
                obs = {**experiment.observables(), **extra}
            bad = [k for k, v in obs.items() if not math.isfinite(float(v))]
            rows.append({k: float(v) for k, v in obs.items()})
            times.append(float(config.ode_time(step)))
            steps_logged.append(step)
            if bad:
                raise DivergenceError(step, f"non-finite {bad[0]}", partial=self._trajectory(experiment, rows[:-1], times[:-1], steps_logged[:-1], status=-1, message=f"diverged at step {step}"))
            return obs

        if start == 0:
            log(0, {})
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=steps, initial=start, desc=f"{experiment.paper}/{experiment.name}", leave=False)
        last: dict[str, float] = {}
        saved_at = time.monotonic()
        for s in range(start, steps):
            last = experiment.step(s)
            for k, v in last.items():
                if not math.isfinite(float(v)):
                    raise DivergenceError(s + 1, f"non-finite {k}", partial=self._trajectory(
                        experiment, rows, times, steps_logged, status=-1, message=f"diverged at step {s + 1}"))
            done = s + 1
            if done in log_at:
                obs = log(done, {f"minibatch_{k}": v for k, v in last.items()})
                if stop_when is not None and stop_when(obs):
                    break
            if bar is not None:
                bar.update(1)
                post = {k: f"{float(v):.4g}" for k, v in last.items()}
                rate, per_step = bar.format_dict.get("rate"), getattr(experiment, "tokens_per_step", None)
                if rate and per_step:  # experiments that train on tokens show tokens/s
                    post["tok/s"] = f"{rate * per_step:.0f}"
                bar.set_postfix(post, refresh=False)
            if ckpt is not None and (done == steps or caught or (
                    steps_logged[-1] == done if every_kind == "log" else
                    done % every == 0 if every_kind == "steps" else time.monotonic() - saved_at >= every)):
                saved_at = save_checkpoint(done)
            if caught:
                if bar is not None:
                    bar.close()
                raise TrainingInterrupted(caught[0], done, self._trajectory(
                    experiment, rows, times, steps_logged, status=1, message=f"interrupted at step {done}"),
                    None if ckpt is None else str(ckpt.parent if meta.name == "checkpoint.json" else ckpt))
        if bar is not None:
            bar.close()
        return self._trajectory(experiment, rows, times, steps_logged)

    def _trajectory(self, experiment, rows, times, steps_logged, status=0, message="ok"):
        names = sorted({k for r in rows for k in r})
        variables = {n: np.array([r.get(n, np.nan) for r in rows]) for n in names}
        variables["step"] = np.asarray(steps_logged, dtype=np.float64)
        info = experiment.parameters_info() if hasattr(experiment, "parameters_info") else {}
        return make_trajectory(
            np.asarray(times), variables, paper=experiment.paper, system=experiment.name, source="train",
            backend=f"torch-{resolve_device(self.device).type}", parameter_values=info, seed=self._seed(experiment),
            status=status, message=message, config=experiment.config,
        )


def _global_rng() -> dict[str, Any]:
    """The global RNG states an experiment might draw from besides its generator."""
    out = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def _set_global_rng(state: dict[str, Any] | None) -> None:
    if not state:
        return
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def stack_runs(trajs) -> "Any":
    """Concatenate trajectories of repeated runs (same time grid) along a new ``run`` dim."""
    import xarray as xr

    n = min(t.sizes["time"] for t in trajs)
    return xr.concat([t.isel(time=slice(0, n)) for t in trajs], dim="run", combine_attrs="drop_conflicts")
