"""Scan & Snap in PyTorch: the official sequence-class data (docs/papers/scan_snap.md §1.4), the direct
(Y, Z) model of §2.2 (``Model2``), its two optimisers, and two data paths that must agree.

Modules, read in this order:

* :mod:`.data` — the sampler: token sequences (as the official code) or exact count vectors
  (spec §1.3, cost independent of ``T``);
* :mod:`.model` — :class:`DirectYZ` (``R`` independent copies), the cross-entropy, one batch's loss;
* :mod:`.update` — the update rule (SGD with momentum, Adam; optax-style ``init``/``update``);
* :mod:`.experiment` — :class:`ScanSnapExperiment` for the Trainer, :func:`train`, :func:`run`
  (the paper row's ``train`` slot), every seed of a setting in one call (:func:`train_seeds`),
  batched grids (:func:`train_grid`) and the jax SGD map
  (:func:`sgd_ensemble`);
* :mod:`.fast` — the compiled (numba) count-vector SGD engine of the Fig. 6 grid;
* :mod:`.text` — the real-text protocol (Figs. 7 and 10; the row's ``text`` slot);
* :mod:`.ladder` — the realism ladder: the same data and observables for the reduced model (rung
  0), the paper's 1-layer transformer as stated (rung 1) and the standard transformer of
  :mod:`empirical.standard` (rung 2).

``fast``, ``text`` and ``ladder`` are imported on demand (numba; the real-text stack).
"""

from . import update
from .data import Sampler, counts_of
from .experiment import ScanSnapExperiment, run, sgd_ensemble, train, train_grid, train_seeds
from .model import DirectYZ, cross_entropy, loss_step

__all__ = ["Sampler", "counts_of", "DirectYZ", "cross_entropy", "loss_step", "update", "ScanSnapExperiment",
           "train", "run", "train_seeds", "train_grid", "sgd_ensemble"]
