"""theory/sampling.py: alias tables sample exactly the categorical they were built from; tuple
lengths, compositions and multinomial probabilities against brute force and scipy."""

import math

import numpy as np
import pytest
from scipy import stats

from theory.sampling import alias_draw, alias_table, compositions, multinomial_pmf, tuple_length


def _implied(prob, alias):
    """The distribution an alias table samples: bucket i keeps i w.p. prob[i], else alias[i]."""
    n = prob.size
    q = prob / n
    np.add.at(q, alias, (1 - prob) / n)
    return q


@pytest.mark.parametrize("p", [[0.1, 0.2, 0.7], [1.0], [3.0, 0.0, 1.0, 0.0, 6.0], list(np.arange(1.0, 41.0))])
def test_alias_table_implies_the_distribution(p):
    p = np.asarray(p, float)
    prob, alias = alias_table(p)
    np.testing.assert_allclose(_implied(prob, alias), p / p.sum(), rtol=0, atol=1e-15)
    assert np.all((prob >= 0) & (prob <= 1))


def test_alias_table_refuses_bad_weights():
    for bad in ([], [-1.0, 2.0], [0.0, 0.0], [[0.5, 0.5]]):
        with pytest.raises(ValueError, match="non-negative"):
            alias_table(bad)


def test_alias_draw_on_a_uniform_grid_has_the_exact_frequencies():
    import jax.numpy as jnp

    p = np.array([0.05, 0.15, 0.3, 0.5])
    prob, alias = alias_table(p)
    M = 4 * 2**14  # 2^14 grid points per bucket: each coin resolved to 2^-14
    u = (np.arange(M) + 0.5) / M
    draws = np.asarray(alias_draw(jnp.asarray(u), jnp.asarray(prob), jnp.asarray(alias)))
    freq = np.bincount(draws, minlength=4) / M
    np.testing.assert_allclose(freq, p, atol=4 / M)


def test_tuple_length_is_the_largest_that_fits():
    for n in (1, 2, 3, 7, 50):
        for length in (1, 2, 5, 9):
            for cap in (1, 10, 1000, 10**6):
                brute = max([L for L in range(1, length + 1) if n**L <= cap], default=1)
                assert tuple_length(n, length, cap) == brute, (n, length, cap)


def test_compositions_and_multinomial_pmf():
    C = compositions(5, 3)
    assert C.shape == (math.comb(7, 2), 3) and np.all(C.sum(1) == 5) and np.all(C >= 0)
    assert len({tuple(r) for r in C}) == len(C)
    p = np.array([0.2, 0.5, 0.3])
    pmf = multinomial_pmf(C, p)
    np.testing.assert_allclose(pmf, stats.multinomial.pmf(C, 5, p), rtol=1e-12)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-13)
    np.testing.assert_allclose(multinomial_pmf(np.array([[0, 4]]), np.array([0.0, 1.0])), [1.0])  # 0 log 0 = 0
