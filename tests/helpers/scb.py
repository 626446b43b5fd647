"""Helpers shared by the SCB tests."""

import torch

from empirical import scb as escb


def set_up_experiment(cfg, seed: int = 0) -> "escb.SCBExperiment":
    """An :class:`empirical.scb.SCBExperiment` of ``cfg`` set up on the CPU with generator ``seed``."""
    exp = escb.SCBExperiment(cfg)
    gen = torch.Generator().manual_seed(seed)
    exp.setup(torch.device("cpu"), gen)
    return exp
