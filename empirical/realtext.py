"""The machinery every paper's real-text protocol shares: :class:`TextProtocol`, the
frozen, validated Config of a protocol with ``quick()`` (CPU, small vocabulary, short runs; what
``make figures`` runs) and ``full()`` (the papers' protocols, for a GPU) presets, and
:func:`run_text_cells`, which runs a protocol's grid of independent runs as sweep cells of
:mod:`empirical.sweeps` (computed by :func:`empirical.textrun.text_cell`): a result store makes an
interrupted protocol resume without recomputing finished runs, and ``workers=K`` / ``ray=ADDRESS``
run the cells in parallel. Every run is a :func:`empirical.textrun.train_text`.

The protocols themselves are the papers' (the ``text`` slot of each row): Scan & Snap Figs. 7/10 in
:mod:`empirical.scan_snap.text`, JoMA Figs. 6/8 in :mod:`empirical.joma.text`, the topic paper's
LDA ratios in :mod:`empirical.topic.text`.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


from theory.errors import ConfigError

from .sweeps import Cell, load_cells, run_cells
from .textrun import TextRunConfig, TextSettings, cell_config, check_fits
from .trainer import resolve_device

__all__ = ["TextProtocol", "run_text_cells", "TEXT_CELL", "FULL_VOCAB"]

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

    def check_corpus(self) -> None:
        """``ConfigError('corpus', ...)`` unless the corpus can feed this protocol's runs (checked
        before any run: :func:`empirical.textrun.check_fits`)."""
        check_fits(self.run())

    def protocol(self, *, device: str = "auto", progress: bool = False, **sweep) -> dict[str, Any]:
        """Run this protocol (``sweep``: ``store``/``workers``/``ray``/``bar`` for protocols run as cells)."""
        raise NotImplementedError

    @classmethod
    def quick(cls, **changes) -> "TextProtocol":
        return cls(**{**cls.QUICK, **changes})

    @classmethod
    def full(cls, **changes) -> "TextProtocol":
        return cls(**{**cls.FULL, **changes})


def run_text_cells(paper: str, jobs: Sequence[tuple[Mapping[str, Any], TextRunConfig]], *, device: str = "auto",
                   progress: bool = False, store: str | Path | None = None, workers: int = 1,
                   ray: str | None = None, bar=None) -> list:
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
    cells = [Cell(paper, cell_config(run), job="text", options={"device": dev}, swept=dict(swept))
             for swept, run in jobs]

    def note(key, status, err):
        print(f"{paper}: cell {key} {status}{': ' + err if err else ''}", file=sys.stderr)

    runtime = {"progress": bool(progress and workers == 1 and ray is None)}  # the in-process run's bar
    with contextlib.ExitStack() as stack:
        if store is None:
            store = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"tdyn-{paper}-"))
        run_cells(TEXT_CELL, cells, store, workers=workers, ray=ray, progress=note if progress else None,
                  runtime=runtime, bar=bar)
        return load_cells(store, cells)
