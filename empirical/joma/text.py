"""JoMA on real text (docs/papers/joma.md §5 Figs. 6 and 8; the paper row's ``text`` slot).

:class:`JomaTextConfig` — Fig. 6: per-layer validation attention entropy and fc1 stable rank over
training for several depths (Adam 1e-4, emsize 200, one head, bptt 35, dropout 0.2, untied
decoder); Fig. 8: the Adam learning-rate sweep of the 5-layer model. ``quick()`` (CPU, small
vocabulary, short runs) and ``full()`` (the paper's protocol, for a GPU) presets. Every run is a
sweep cell (:func:`empirical.realtext.run_text_cells`): a store makes an interrupted protocol
resume, ``workers``/``ray`` run cells in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..realtext import FULL_VOCAB, TextProtocol, run_text_cells
from ..textrun import TextRunConfig

__all__ = ["JomaTextConfig", "joma_protocol", "per_layer_summary"]


@dataclass(frozen=True)
class JomaTextConfig(TextProtocol):
    """Fig. 6: ``layers`` depths at Adam ``lr``; Fig. 8: depth ``sweep_layers`` at each of
    ``sweep_lrs``; every run ``steps`` minibatches logged every ``log_every``; ``seeds`` averaged."""

    lr: float = 1e-4
    layers: tuple[int, ...] = (1, 2, 5)
    sweep_layers: int = 5
    sweep_lrs: tuple[float, ...] = (1e-4, 1e-3)
    # quick: 3 seeds (~58 CPU-s each) for the figures and the untested claims' measured values (200 minibatches
    # lie outside the paper's regime, so no verdict reads them); full: 12
    seeds: tuple[int, ...] = (1, 2, 3)
    steps: int = 200
    log_every: int = 20

    QUICK = {}
    FULL = dict(vocab_size=FULL_VOCAB, layers=(1, 2, 5, 10), sweep_lrs=(1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 1e-3, 1e-2),
                seeds=tuple(range(1, 13)), steps=6900, log_every=100, eval_chunks=0)  # 20 epochs of the split

    def sweep_run(self, **changes) -> TextRunConfig:
        """A Fig. 8 run: ``sweep_layers`` layers at Adam ``lr``, the first seed."""
        return self.run(**{"n_layer": self.sweep_layers, "seed": self.seeds[0], **changes})

    def protocol(self, *, device: str = "auto", progress: bool = False, **sweep) -> dict[str, Any]:
        return joma_protocol(self, device=device, progress=progress, **sweep)


def per_layer_summary(traj, prefix: str = "entropy_layer") -> pd.DataFrame:
    """Per layer: initial value, minimum, its step, final value, ``drop = initial - min`` and
    ``bounce = final - min`` (docs/papers/joma.md Fig. 8 quantities)."""
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
                  store: str | Path | None = None, workers: int = 1, ray: str | None = None,
                  bar=None) -> dict[str, Any]:
    """Returns ``depth[L]`` and ``sweep[lr]`` (seed-averaged trajectories with ``val_loss``,
    ``entropy_layer{l}``, ``stable_rank_layer{l}`` per logged step), ``runs[(L, lr)]`` (the
    per-seed trajectories, in ``cfg.seeds`` order) and ``seconds``. Every
    (layers, lr, seed) run is a cell of :func:`~empirical.realtext.run_text_cells` (``store``,
    ``workers``, ``ray``, the cells' ``bar``); the depth run at ``lr`` doubles as the sweep's run at that lr."""
    pairs = list(dict.fromkeys([(L, cfg.lr) for L in cfg.layers] + [(cfg.sweep_layers, lr) for lr in cfg.sweep_lrs]))
    jobs = [({"n_layer": L, "lr": lr, "seed": seed}, cfg.run(n_layer=L, lr=lr, seed=seed))
            for L, lr in pairs for seed in cfg.seeds]
    trajs = run_text_cells("joma", jobs, device=device, progress=progress, store=store, workers=workers, ray=ray,
                           bar=bar)
    n = len(cfg.seeds)
    runs = {p: [t.drop_vars("snapshot") for t in trajs[i * n:(i + 1) * n]] for i, p in enumerate(pairs)}
    mean = {p: _mean_runs(r) for p, r in runs.items()}
    return {"depth": {L: mean[(L, cfg.lr)] for L in cfg.layers},
            "sweep": {lr: mean[(cfg.sweep_layers, lr)] for lr in cfg.sweep_lrs},
            "runs": runs, "seconds": sum(t.attrs["train_seconds"] for t in trajs)}
