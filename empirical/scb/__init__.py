"""SCB in PyTorch (docs/papers/scb.md): the real network on the paper's data, logging the theory's
observables. Read in this order:

* :mod:`.data` — the sampler of spec §1.2 and the transfer task's correlated transition;
* :mod:`.model` — the linear transformer ``yhat = V X a^(k)`` (spec §2), softmax variant, loss;
* :mod:`.update` — the update rule (preconditioned proximal SGD, plain SGD);
* :mod:`.experiment` — :class:`SCBExperiment`, :func:`train`, :func:`run` (the table's train slot);
* :mod:`.fast` — the same SGD at the authors' scale (N = 500, T = 1e5): gathers, scatter-adds and
  the numba kernels of :mod:`.kernels`;
* :mod:`.l1` — the l1-proximal vs vanilla SGD study: many runs batched in one tensor;
* :mod:`.svag` — batched SGD with SVAG's schedule (lr/l, l x the steps, two minibatches per step):
  the weak-error check of the SDE.
"""

from .data import SCBSampler, correlated_transition
from .experiment import SCBExperiment, run, train
from .model import LinearSCB, SoftmaxSCB, squared_loss

__all__ = ["SCBSampler", "correlated_transition", "LinearSCB", "SoftmaxSCB", "squared_loss", "SCBExperiment",
           "train", "run"]
