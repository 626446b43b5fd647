"""tdyn.empirical — train the real networks (PyTorch; GPU if present) and log the theory's
observables under the same names, as Trajectories."""

from .trainer import Experiment, Trainer, resolve_device, stack_runs

__all__ = ["Trainer", "Experiment", "resolve_device", "stack_runs"]
