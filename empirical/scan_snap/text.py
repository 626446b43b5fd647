"""Scan & Snap on real text (docs/papers/scan_snap.md §5.6; the paper row's ``text`` slot).

Fig. 7: lowest-layer attention maps of 1- and 3-layer models at iterations 0, 500, 1000, 1500
(SGD lr 5, FFN lr 10, StepLR 0.95 per epoch, clip 0.5, dropout 0.3, as the official notebook).
Fig. 10: validation attention entropy of a 1-layer model vs one SGD learning rate eta for all
parameters, ``seeds`` (quick 3, full 12: the real-text claims are decided over seeds in the paper's setting,
figures/scan_snap/text_claims.toml). Every run is a :func:`empirical.textrun.train_text`, run as a sweep
cell (:func:`empirical.realtext.run_text_cells`: resumable store, local workers or Ray).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..realtext import FULL_VOCAB, TextProtocol, run_text_cells
from ..textrun import TextRunConfig

__all__ = ["ScanSnapTextConfig", "scan_snap_protocol"]


@dataclass(frozen=True)
class ScanSnapTextConfig(TextProtocol):
    """Fig. 7: ``layers`` models, SGD ``lr`` (FFN ``ffn_lr``), StepLR ``lr_decay`` per epoch, clip
    ``clip``, ``dropout``, one run per model and seed of ``fig7_seeds`` (quick: 3, ~28 CPU-s a seed;
    the quick runs lie outside the claims' regime, so no verdict reads them; the figure shows the first); attention maps logged at
    ``log_steps()``. Fig. 10: 1-layer models, one SGD learning rate per run (``sweep_lrs``) for
    every parameter, ``seeds``, ``sweep_steps`` minibatches, ``sweep_dropout``."""

    dropout: float = 0.3
    lr: float = 5.0
    ffn_lr: float = 10.0
    lr_decay: float = 0.95
    clip: float = 0.5
    layers: tuple[int, ...] = (1, 3)
    sweep_lrs: tuple[float, ...] = (1.0, 3.0, 5.0)
    seeds: tuple[int, ...] = (1, 2, 3)
    fig7_seeds: tuple[int, ...] = (1, 2, 3)  # ~28 CPU-s a seed
    sweep_steps: int = 120
    sweep_dropout: float = 0.2

    QUICK = {}
    FULL = dict(vocab_size=FULL_VOCAB, steps=1500, log_every=500, sweep_lrs=(1.0, 2.0, 3.0, 4.0, 5.0),
                seeds=tuple(range(1, 13)), fig7_seeds=tuple(range(1, 13)), sweep_steps=1725, eval_chunks=0)  # 5 epochs of the split

    def sweep_run(self, **changes) -> TextRunConfig:
        """A Fig. 10 run: 1 layer, one SGD learning rate for every parameter, no decay."""
        return self.run(**{"n_layer": 1, "optimizer": "sgd", "lr": self.sweep_lrs[0], "ffn_lr": 0.0, "lr_decay": 1.0,
                           "dropout": self.sweep_dropout, "seed": self.seeds[0], "steps": self.sweep_steps,
                           "log_every": self.sweep_steps, **changes})

    def protocol(self, *, device: str = "auto", progress: bool = False, **sweep) -> dict[str, Any]:
        return scan_snap_protocol(self, device=device, progress=progress, **sweep)


def scan_snap_protocol(cfg: ScanSnapTextConfig, *, device: str = "auto", progress: bool = False,
                       store: str | Path | None = None, workers: int = 1, ray: str | None = None,
                       bar=None) -> dict[str, Any]:
    """Returns ``maps[n_layer] = {step: (T, T) map}`` and ``traj[n_layer]`` (validation entropy per
    layer over training) of the first of ``fig7_seeds``, ``fig7_runs[n_layer]`` (every seed's
    trajectory, maps as ``snapshot``), ``sweep`` (DataFrame: lr, seed, entropy, val_loss),
    ``seconds`` (all training) and ``fig7_seconds`` (Fig. 7's). Every run is a cell of
    :func:`run_text_cells` (``store``, ``workers``, ``ray``, the cells' ``bar``)."""
    fig7 = [(L, seed) for seed in cfg.fig7_seeds for L in cfg.layers]
    jobs = [({"part": "fig7", "n_layer": L, **({"seed": seed} if seed != cfg.fig7_seeds[0] else {})},
             cfg.run(n_layer=L, optimizer="sgd", seed=seed)) for L, seed in fig7]
    grid = [(lr, seed) for lr in cfg.sweep_lrs for seed in cfg.seeds]
    jobs += [({"part": "fig10", "lr": lr, "seed": seed}, cfg.sweep_run(lr=lr, seed=seed)) for lr, seed in grid]
    trajs = run_text_cells("scan-snap", jobs, device=device, progress=progress, store=store, workers=workers, ray=ray,
                           bar=bar)
    out: dict[str, Any] = {"maps": {}, "traj": {}, "fig7_runs": {L: [] for L in cfg.layers},
                           "seconds": sum(t.attrs["train_seconds"] for t in trajs),
                           "fig7_seconds": sum(t.attrs["train_seconds"] for t in trajs[:len(fig7)])}
    for (L, seed), traj in zip(fig7, trajs):
        out["fig7_runs"][L].append(traj)
        if seed == cfg.fig7_seeds[0]:
            out["maps"][L] = {int(s): m for s, m in zip(traj["step"].values, traj["snapshot"].values)}
            out["traj"][L] = traj.drop_vars("snapshot")
    out["sweep"] = pd.DataFrame([{"lr": lr, "seed": seed, "entropy": float(t["entropy_layer0"].values[-1]),
                                  "val_loss": float(t["val_loss"].values[-1])}
                                 for (lr, seed), t in zip(grid, trajs[len(fig7):])])
    return out
