"""Minibatch-SGD noise of the JoMA block as an SDE (docs/papers/joma.md §2.7 — this project's extension, not in
the paper): the generic SDE (:func:`theory.noise_sde.noise_sde`; ``simulate.noise_sde`` re-exports it)
of the noise the block system derives from its per-sample loss (:func:`.derive.per_sample_loss` over
:func:`.derive.rows_distribution`).

In ODE time ``t = lr * step`` one optimiser step is ``dt = lr`` (:func:`theory.noise.step_time`
reads it from :meth:`JomaConfig.ode_time`), so

    d theta = f(theta) dt + sqrt(lr / B) F(theta) dW,    F F^T = Cov_rows[g] = (1/N) sum_n (g_n - f)(g_n - f)^T,

``f`` the block flow (the mean over the ``N`` rows of the per-sample flow ``g_n``), ``B`` rows per
minibatch drawn with replacement. ``F`` is the exact ``outcomes`` factor ``(g_n - f)/sqrt(N)``
(one Brownian motion per row; no matrix square root). Float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ..errors import ConfigError
from .config import JomaConfig
from .problem import check_block_variant, problem

__all__ = ["minibatch_sde", "sde_model"]


@cache
def _model_class():
    """The model class, made on first use (:mod:`theory.noise_sde` loads jax callables lazily)."""
    from theory.noise_sde import NoiseSDE

    @dataclass(frozen=True, eq=False)
    class BlockNoiseSDE(NoiseSDE):
        """:class:`theory.noise_sde.NoiseSDE` compared (and hashed) by its system and factor: the data,
        the initial state, the learning rate and the batch travel in ``args``/``y0``, so the
        compiled ensemble solver (cached per model by :mod:`simulate`) is reused across them."""

        def _structure(self):
            return (self.system, self.factor, self.mc_samples)

        def __eq__(self, other):
            return isinstance(other, NoiseSDE) and type(other) is type(self) and self._structure() == other._structure()

        def __hash__(self):
            return hash(("BlockNoiseSDE", *self._structure()))

    return BlockNoiseSDE


def sde_model(config: JomaConfig, *, batch: int | None = None):
    """The block SDE of ``config`` (a block variant, ``fixed`` or ``ce``: the ODE's fixed-``g``
    flow) with ``batch`` rows per minibatch (default ``config.batch``), started at the config's
    initial state; its ``dt`` is one optimiser step (``lr``)."""
    from theory.noise_sde import noise_sde

    if batch is not None and int(batch) < 1:
        raise ConfigError("batch", f"must be >= 1, got {batch}")
    base, _ = noise_sde(problem(config), batch=batch)
    return _model_class()(base.system, base.params, base.y0, base.step_time, base.batch, base.factor, base.mc_samples)


def minibatch_sde(config: JomaConfig) -> tuple[object, np.ndarray]:
    """``(model, t)`` for `tdyn simulate joma --sde` (the paper row's ``sde`` slot):
    :func:`sde_model` of the config and ``t = config.ode_times()`` (spec §2.7)."""
    check_block_variant(config, "minibatch SDE")
    return sde_model(config), np.asarray(config.ode_times(), dtype=np.float64)
