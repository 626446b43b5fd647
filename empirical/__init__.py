"""tdyn.empirical — train the real networks (PyTorch; GPU if present) and log the theory's
observables under the same names, as Trajectories."""

from .trainer import Experiment, ModuleState, Trainer, resolve_device, stack_runs, torch_threads

__all__ = ["Trainer", "Experiment", "ModuleState", "resolve_device", "stack_runs", "torch_threads"]
