"""The real-text protocols shared machinery and JoMA's protocol (issue 10), each a function of a
frozen, validated Config (a :class:`TextProtocol`) with ``quick()`` (CPU, small vocabulary, short
runs; what ``make figures`` runs) and ``full()`` (the papers' protocols, for a GPU) presets. Every
run is a :func:`empirical.textrun.train_text`. Scan & Snap's protocol is in
:mod:`empirical.scan_snap.text`, the topic paper's (LDA topics and same/different-topic ratios) in
:mod:`empirical.topic.text`.

* :func:`joma_protocol` — papers/joma.md Figs. 6 and 8: per-layer validation attention entropy and
  fc1 stable rank over training for several depths (Adam 1e-4, emsize 200, one head, bptt 35,
  dropout 0.2, untied decoder) and the Adam learning-rate sweep of the 5-layer model.

**Runs as sweep cells.** The Scan & Snap and JoMA protocols are grids of independent runs; each
run is a cell of :mod:`empirical.sweeps` computed by :func:`empirical.textrun.text_cell`
(:func:`run_text_cells`): a result store makes an interrupted protocol resume without recomputing
finished runs, and ``workers=K`` / ``ray=ADDRESS`` run the cells in parallel.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd

from theory.errors import ConfigError

from .sweeps import Cell, load_cells, run_cells
from .textrun import CELL_THREADS, TextRunConfig, TextSettings, cell_config, cell_progress
from .trainer import resolve_device

__all__ = ["TextProtocol", "JomaTextConfig", "joma_protocol", "run_text_cells", "per_layer_summary", "TEXT_CELL",
           "FULL_VOCAB"]

#: the sweep cell function of every real-text run (:func:`empirical.textrun.text_cell`)
TEXT_CELL = "empirical.textrun:text_cell"
#: vocabulary cap of the full presets: above the 12,455 types of the training split wiki.test.tokens (= no cap)
FULL_VOCAB = 40000


@dataclass(frozen=True)
class TextProtocol(TextSettings):
    """A protocol's shared settings; ``steps``/``log_every`` are those of its main runs."""

    vocab_size: int = 1000
    steps: int = 240
    log_every: int = 80
    eval_chunks: int = 8

    def validate(self) -> None:
        self.run().validate()
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, tuple) and (not v or any(not x > 0 for x in v)):
                raise ConfigError(f.name, f"must be a non-empty tuple of positive numbers, got {v!r}")

    def run(self, **changes) -> TextRunConfig:
        """The :class:`TextRunConfig` of one run of this protocol."""
        base = {f.name: getattr(self, f.name) for f in fields(TextRunConfig) if hasattr(self, f.name)}
        return TextRunConfig(**{**base, **changes})

    def sweep_run(self, **changes) -> TextRunConfig:
        """The run the paper sweeps (``tdyn sweep PAPER --kind text``'s base config)."""
        return self.run(**changes)

    def protocol(self, *, device: str = "auto", progress: bool = False, **sweep) -> dict[str, Any]:
        """Run this protocol (``sweep``: ``store``/``workers``/``ray`` for protocols run as cells)."""
        raise NotImplementedError

    @classmethod
    def quick(cls, **changes) -> "TextProtocol":
        return cls(**{**cls.QUICK, **changes})

    @classmethod
    def full(cls, **changes) -> "TextProtocol":
        return cls(**{**cls.FULL, **changes})


def run_text_cells(paper: str, jobs: Sequence[tuple[Mapping[str, Any], TextRunConfig]], *, device: str = "auto",
                   progress: bool = False, store: str | Path | None = None, workers: int = 1,
                   ray: str | None = None) -> list:
    """Run ``jobs`` (``(swept values, run config)`` pairs) as cells of :func:`empirical.sweeps.run_cells`
    with :func:`empirical.textrun.text_cell`; returns their trajectories (in memory, in job order).
    ``store`` (a folder; None: a temporary one) keeps finished runs: a rerun on the same code skips
    them, so an interrupted protocol resumes. ``workers > 1`` runs cells in that many local
    processes, ``ray`` (an address or ``"auto"``) on a Ray cluster (the workers write the cells into
    ``store``: on several machines it must be a shared folder, and so must the corpus); every cell
    is the same :func:`~empirical.textrun.train_text` run as in-process (same seed -> same numbers). A failed
    cell raises :class:`~empirical.sweeps.CellsFailed` after the others finished."""
    if workers < 1:
        raise ConfigError("workers", f"must be >= 1, got {workers}")
    dev = str(resolve_device(device))
    cells = [Cell(paper, cell_config(run), kind="text", options={"device": dev}, swept=dict(swept))
             for swept, run in jobs]

    def note(key, status, err):
        print(f"{paper}: cell {key} {status}{': ' + err if err else ''}", file=sys.stderr)

    with contextlib.ExitStack() as stack:
        if store is None:
            store = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"tdyn-{paper}-"))
        stack.enter_context(cell_progress(progress and workers == 1 and ray is None))
        if workers > 1 and ray is None:  # the spawned workers share the cores
            threads = str(max(1, (os.cpu_count() or 1) // workers))
            stack.enter_context(mock.patch.dict(os.environ, {CELL_THREADS: threads}))
        run_cells(TEXT_CELL, cells, store, workers=workers, ray=ray, progress=note if progress else None)
        return load_cells(store, cells)


# ------------------------------------------------------------------------------------------------
# JoMA, Figs. 6 and 8
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JomaTextConfig(TextProtocol):
    """Fig. 6: ``layers`` depths at Adam ``lr``; Fig. 8: depth ``sweep_layers`` at each of
    ``sweep_lrs``; every run ``steps`` minibatches logged every ``log_every``; ``seeds`` averaged."""

    lr: float = 1e-4
    layers: tuple[int, ...] = (1, 2, 5)
    sweep_layers: int = 5
    sweep_lrs: tuple[float, ...] = (1e-4, 1e-3)
    seeds: tuple[int, ...] = (1,)
    steps: int = 200
    log_every: int = 20

    QUICK = {}
    FULL = dict(vocab_size=FULL_VOCAB, layers=(1, 2, 5, 10), sweep_lrs=(1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 1e-3, 1e-2),
                seeds=(1, 2, 3), steps=6900, log_every=100, eval_chunks=0)  # 20 epochs of the split

    def sweep_run(self, **changes) -> TextRunConfig:
        """A Fig. 8 run: ``sweep_layers`` layers at Adam ``lr``, the first seed."""
        return self.run(**{"n_layer": self.sweep_layers, "seed": self.seeds[0], **changes})

    def protocol(self, *, device: str = "auto", progress: bool = False, **sweep) -> dict[str, Any]:
        return joma_protocol(self, device=device, progress=progress, **sweep)


def per_layer_summary(traj, prefix: str = "entropy_layer") -> pd.DataFrame:
    """Per layer: initial value, minimum, its step, final value, ``drop = initial - min`` and
    ``bounce = final - min`` (papers/joma.md Fig. 8 quantities)."""
    steps = traj["step"].values
    rows = []
    for name in sorted((n for n in traj.data_vars if n.startswith(prefix)), key=lambda n: int(n[len(prefix):])):
        y = traj[name].values
        i = int(np.argmin(y))
        rows.append({"layer": int(name[len(prefix):]), "initial": y[0], "min": y[i], "min_step": int(steps[i]),
                     "final": y[-1], "drop": y[0] - y[i], "bounce": y[-1] - y[i]})
    return pd.DataFrame(rows)


def _mean_runs(trajs):
    """Seed average of runs logged on the same steps (an xarray Dataset)."""
    import xarray as xr

    return xr.concat(trajs, dim="run", combine_attrs="drop_conflicts").mean("run") if len(trajs) > 1 else trajs[0]


def joma_protocol(cfg: JomaTextConfig, *, device: str = "auto", progress: bool = False,
                  store: str | Path | None = None, workers: int = 1, ray: str | None = None) -> dict[str, Any]:
    """Returns ``depth[L]`` and ``sweep[lr]`` (seed-averaged trajectories with ``val_loss``,
    ``entropy_layer{l}``, ``stable_rank_layer{l}`` per logged step) and ``seconds``. Every
    (layers, lr, seed) run is a cell of :func:`run_text_cells` (``store``, ``workers``, ``ray``);
    the depth run at ``lr`` doubles as the sweep's run at that lr."""
    pairs = list(dict.fromkeys([(L, cfg.lr) for L in cfg.layers] + [(cfg.sweep_layers, lr) for lr in cfg.sweep_lrs]))
    jobs = [({"n_layer": L, "lr": lr, "seed": seed}, cfg.run(n_layer=L, lr=lr, seed=seed))
            for L, lr in pairs for seed in cfg.seeds]
    trajs = run_text_cells("joma", jobs, device=device, progress=progress, store=store, workers=workers, ray=ray)
    n = len(cfg.seeds)
    mean = {p: _mean_runs([t.drop_vars("snapshot") for t in trajs[i * n:(i + 1) * n]]) for i, p in enumerate(pairs)}
    return {"depth": {L: mean[(L, cfg.lr)] for L in cfg.layers},
            "sweep": {lr: mean[(cfg.sweep_layers, lr)] for lr in cfg.sweep_lrs},
            "seconds": sum(t.attrs["train_seconds"] for t in trajs)}
