"""JoMA in PyTorch: one entry point, :func:`run` (``tdyn train joma --variant V``), over the
experiments of papers/joma.md §5 and §3 (see :mod:`theory.joma.config` for the variants).

Modules: :mod:`.joma_block` (the block, its ``fixed``/``ce`` tops and the headline ``mixture``
network), :mod:`.joma_toys` (the ``probe`` and ``hblt`` toys), :mod:`.joma_hier` (Table 1's
multi-layer Transformer). Every variant reads its settings from the config (``config.variant``;
a setting the variant would ignore is a ``ConfigError`` at construction) and logs at
``config.log_steps()`` with time ``config.ode_time(step)``.
"""

from __future__ import annotations

from theory.errors import ConfigError
from theory.joma import JomaConfig

from .joma_block import BlockExperiment, JomaBlock, MixtureExperiment, softmax_zhat
from .joma_hier import HierExperiment, HierTransformer, RandomCombinationHierarchy, hier_experiment
from .joma_toys import HBLTBlockExperiment, ProbeExperiment, half_times, hblt_block_data, hblt_sample
from .trainer import Trainer

__all__ = ["run", "train", "experiment", "JomaBlock", "BlockExperiment", "MixtureExperiment",
           "ProbeExperiment", "HBLTBlockExperiment", "HierTransformer", "HierExperiment",
           "RandomCombinationHierarchy", "hblt_sample", "hblt_block_data", "half_times",
           "softmax_zhat"]


def experiment(config: JomaConfig, variant: str | None = None):
    """The experiment object of ``variant`` (default: ``config.variant``; another variant rebinds the
    config's explicit settings to it, and a setting it ignores is a ``ConfigError``)."""
    c = config if variant in (None, config.variant) else config.replace(variant=variant)
    variant = c.variant
    if variant == "fixed" and c.batch != c.variant_default("batch"):
        raise ConfigError("batch", "the fixed block trains full-batch; batch is the minibatch of its SDE "
                                   "(tdyn simulate joma --sde)")
    if variant in ("fixed", "ce"):
        return BlockExperiment(c)
    return {"mixture": MixtureExperiment, "probe": ProbeExperiment, "hblt": HBLTBlockExperiment,
            "hier": hier_experiment}[variant](c)


def train(config: JomaConfig, variant: str | None = None, *, device: str = "cpu", progress: bool = False,
          checkpoint=None, checkpoint_every: int = 0, resume: bool = False):
    """``(trajectory, experiment)``: one run logged at the bound config's ``log_steps()``."""
    exp = experiment(config, variant)
    c = exp.config
    trainer = Trainer(device=device, seed=c.seed, progress=progress, checkpoint=checkpoint,
                      checkpoint_every=checkpoint_every, resume=resume)
    return trainer.run(exp), exp


def run(config: JomaConfig, *, device: str = "auto", variant: str | None = None, progress: bool = False,
        checkpoint=None, checkpoint_every: int = 0, resume: bool = False):
    """`tdyn train joma [--variant fixed|ce|mixture|probe|hblt|hier]`: one run, the trajectory.
    A ``--set`` the variant would ignore is a ``ConfigError`` (exit 2)."""
    return train(config, variant or config.variant, device=device, progress=progress, checkpoint=checkpoint,
                 checkpoint_every=checkpoint_every, resume=resume)[0]
