"""Exact discrete sampling from one uniform per draw: Walker's alias method (Vose's construction).

For SDE models that draw per-sample data inside a jitted step (``uniforms_per_step``, see
:mod:`simulate._em`): a categorical over ``n`` outcomes costs one uniform, one multiply and two
gathers, whatever ``n`` — instead of ``n`` Gumbels or an ``n``-way comparison.

Draw: ``x = u n``, ``i = floor(x)``, keep ``i`` if ``x - i < prob[i]`` else take ``alias[i]``.
This is exact for an exact uniform; a float64 uniform (52 random bits) leaves ``52 - log2 n`` bits
for the coin, so each outcome's probability is resolved to ``n 2^-52`` (about 1e-12 for
``n = 10^4``) — far below the Monte-Carlo error of any ensemble.
"""

from __future__ import annotations

import numpy as np

__all__ = ["alias_table", "alias_draw", "tuple_length", "compositions", "multinomial_pmf"]


def alias_table(p) -> tuple[np.ndarray, np.ndarray]:
    """``(prob (n,), alias (n,))`` for the categorical ``p`` (n,) (normalised here; Vose 1991)."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or p.size == 0 or np.any(p < 0) or not p.sum() > 0:
        raise ValueError("alias_table needs a non-empty 1-D array of non-negative weights")
    n = p.size
    scaled = p / p.sum() * n
    prob, alias = np.ones(n), np.arange(n)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    return prob, alias  # leftovers (rounding) keep prob 1


def alias_draw(u, prob, alias):
    """Outcome indices (int32, shape of ``u``) from uniforms ``u`` on [0, 1) (jax)."""
    import jax.numpy as jnp

    n = prob.shape[0]
    x = u * n
    i = jnp.minimum(x.astype(jnp.int32), n - 1)
    return jnp.where(x - i < prob[i], i, alias[i])


def tuple_length(n: int, length: int, max_outcomes: int) -> int:
    """Items per jointly drawn tuple when ``length`` iid draws over ``n`` outcomes are drawn ``L`` at
    a time (one draw over the ``n^L`` tuples): the largest ``1 <= L <= length`` with
    ``n^L <= max_outcomes`` (1 if even ``n`` exceeds it). Integer arithmetic: exact."""
    L = 1
    while L < length and n ** (L + 1) <= max_outcomes:
        L += 1
    return L


def compositions(total: int, parts: int) -> np.ndarray:
    """All count vectors (C, parts) of non-negative ints summing to ``total``,
    ``C = binom(total + parts - 1, parts - 1)``."""
    if parts == 1:
        return np.array([[total]], dtype=np.int64)
    rows = [np.concatenate([np.full((len(rest), 1), first), rest], axis=1)
            for first in range(total, -1, -1) for rest in [compositions(total - first, parts - 1)]]
    return np.concatenate(rows, axis=0)


def multinomial_pmf(counts: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Multinomial probabilities of count vectors ``counts`` (C, n) under ``p`` (n,) (log-space)."""
    from scipy.special import gammaln

    counts = np.asarray(counts)
    with np.errstate(divide="ignore", invalid="ignore"):  # 0 log 0 (the branch np.where drops)
        logp = np.where(counts > 0, counts * np.log(p), 0.0)
    return np.exp(gammaln(counts.sum(1) + 1) - gammaln(counts + 1).sum(1) + logp.sum(1))
