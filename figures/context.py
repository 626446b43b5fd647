"""The settings of one run of tdyn's protocols, in one immutable value passed explicitly.

:class:`RunContext` carries what the CLI's options say about *how* and *on what* the figures,
claims and compare reports run: quick or full presets, the torch device, the real-text corpus, the
sweep store of the grids of runs (real text, Scan & Snap Fig. 6, the claims' maps), local workers,
a Ray address, whether progress is drawn, the output folder and the CPU allowance of a full claim
map. The CLI builds one per command and hands it down; a library caller builds its own::

    from figures.context import RunContext
    ctx = RunContext(quick=True, device="cpu", store="runs", workers=2)
    figures.scb.compare.compare(ctx)

It is a frozen dataclass (hashable: caches key on it) and nothing in tdyn reads a setting from a
module global or the environment instead. Store, workers and Ray change where cells are computed,
never their numbers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from theory.errors import ConfigError

__all__ = ["RunContext", "CPU_CORE_HOURS", "OUT_DIR"]

#: the default output folder of the figures (``<OUT_DIR>/<module>``), under the working directory
OUT_DIR = Path("figures") / "out"

#: a full claim map whose estimated cost exceeds this many CPU core-hours is not run on a CPU
#: (``tdyn claims/figures --full`` name it with its cost instead; ``--cpu-core-hours`` changes it)
CPU_CORE_HOURS = 2.0


@dataclass(frozen=True)
class RunContext:
    """How a protocol runs.

    Attributes:
        quick: the quick presets (minutes on a laptop CPU) rather than the papers' full protocols.
        device: torch device of the training runs: ``"auto"`` (cuda when present), ``"cpu"``, ``"cuda[:i]"``.
        corpus: the real-text corpus (a WikiText directory or ``"wikitext-103"``); ``None``: the
            default, ``../shared/data/wikitext-2`` beside the repository.
        store: the root folder of the grids' sweep stores (protocol ``name`` -> ``store/<name>``);
            ``None``: each protocol's own default (under the outdir).
        workers: local processes for the grids' cells (>= 1).
        ray: a Ray cluster address (or ``"auto"``) for the grids' cells; ``None``: local.
        progress: draw progress bars (on a terminal).
        outdir: where a paper's figures and default stores go; ``None``: ``figures/out/<module>``
            under the working directory.
        cpu_core_hours: the CPU allowance of one full claim map, in core-hours (> 0).
    """

    quick: bool = True
    device: str = "auto"
    corpus: str | None = None
    store: str | None = None
    workers: int = 1
    ray: str | None = None
    progress: bool = False
    outdir: str | None = None
    cpu_core_hours: float = CPU_CORE_HOURS

    def __post_init__(self) -> None:
        for name in ("corpus", "store", "outdir"):  # paths travel as strings: equal contexts hash equal
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                object.__setattr__(self, name, str(value))
        if int(self.workers) != self.workers or self.workers < 1:
            raise ConfigError("workers", f"must be an integer >= 1, got {self.workers!r}")
        try:
            hours = float(self.cpu_core_hours)
        except (TypeError, ValueError):
            raise ConfigError("cpu_core_hours",
                              f"expected a number of core-hours, got {self.cpu_core_hours!r}") from None
        if not hours > 0 or hours == float("inf"):
            raise ConfigError("cpu_core_hours", f"must be a finite number > 0, got {self.cpu_core_hours!r}")
        object.__setattr__(self, "quick", bool(self.quick))
        object.__setattr__(self, "progress", bool(self.progress))
        object.__setattr__(self, "cpu_core_hours", hours)

    def replace(self, **changes: Any) -> RunContext:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, ctx: RunContext | None = None, **given: Any) -> RunContext:
        """``ctx`` (default: a fresh ``RunContext()``) with every keyword in ``given`` that is not
        ``None`` put in: how a function that takes both a context and its own ``quick=``/``device=``
        keywords combines them (an explicit keyword wins)."""
        base = ctx if ctx is not None else cls()
        changes = {k: v for k, v in given.items() if v is not None}
        return base.replace(**changes) if changes else base

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"

    def sweep(self, name: str, default_store: str | Path | None = None) -> dict[str, Any]:
        """``{store, workers, ray}`` of the grid of runs ``name`` (the keywords of
        :func:`empirical.sweeps.run_cells`): ``store/<name>`` when a store root is set, else
        ``default_store``."""
        store = Path(self.store) / name if self.store is not None else default_store
        return {"store": store, "workers": self.workers, "ray": self.ray}

    def corpus_dir(self) -> str | Path:
        """The corpus this context names (:func:`empirical.text.resolve_corpus`: the default when unset)."""
        from empirical.text import resolve_corpus

        return resolve_corpus(self.corpus)

    def paper_outdir(self, module: str) -> Path:
        """The output folder of the paper whose module name is ``module``: ``outdir``, else
        ``figures/out/<module>`` under the working directory."""
        return Path(self.outdir) if self.outdir is not None else OUT_DIR / module
