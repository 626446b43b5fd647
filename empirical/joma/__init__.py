"""JoMA in PyTorch (docs/papers/joma.md §5 and §3): one entry point, :func:`run` (``tdyn train joma
--variant V``; the variants are :attr:`theory.joma.JomaConfig.VARIANTS`).

* :mod:`.data` — HBLT bags and the Table-1 random-combination hierarchy;
* :mod:`.model` — the JoMA block and Table 1's multi-layer Transformer;
* :mod:`.experiment` — the experiments of every variant, :func:`train` and :func:`run`;
* :mod:`.seeds` — :func:`train_seeds`: every seed of a block experiment in one vectorised run (the
  claims' ``runs``; equal to the per-seed runs of :func:`seed_config`);
* :mod:`.text` — the real-text protocol of Figs. 6 and 8 (the paper row's ``text`` slot).

Every experiment reads its settings from the config (a setting its variant would ignore is a
``ConfigError`` at construction) and logs at ``config.log_steps()`` with time
``config.ode_time(step)``.
"""

from .data import RandomCombinationHierarchy, hblt_block_data, hblt_sample
from .experiment import (EXPERIMENTS, BlockExperiment, HBLTBlockExperiment, HierExperiment, MixtureExperiment,
                         ProbeExperiment, experiment, probe_targets, run, train)
from .model import HierBlock, HierTransformer, JomaBlock
from .seeds import BATCHED_VARIANTS, seed_config, train_seeds

__all__ = ["run", "train", "experiment", "EXPERIMENTS", "JomaBlock", "BlockExperiment", "MixtureExperiment",
           "ProbeExperiment", "HBLTBlockExperiment", "HierBlock", "HierTransformer", "HierExperiment",
           "RandomCombinationHierarchy", "hblt_sample", "hblt_block_data", "probe_targets", "train_seeds", "seed_config",
           "BATCHED_VARIANTS"]
