"""empirical/multinomial.py: the exact multinomial sampler (alias-table binomial tree, and its
Generator.binomial fallback) against the multinomial law."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from empirical import multinomial as mn
from theory import scan_snap as ss


def _pmf(n, p):
    """Every outcome of Multinomial(n, p) and its probability (closed form)."""
    out = {}
    for c in itertools.product(range(n + 1), repeat=len(p)):
        if sum(c) == n:
            out[c] = stats.multinomial.pmf(c, n, p)
    return out


@pytest.mark.parametrize("table", [True, False])
def test_sampler_matches_the_multinomial_pmf(table, monkeypatch):
    """n = 4, S = 5 (70 outcomes): the frequencies of 200k draws pass a chi-square test against the
    closed-form pmf (p-value > 1e-3 at a fixed seed); every draw sums to n."""
    if not table:
        monkeypatch.setattr(mn, "TABLE_LIMIT", 0)
        mn._tables.cache_clear()
    p = np.array([0.05, 0.3, 0.1, 0.4, 0.15])
    smp = mn.MultinomialSampler(4, p)
    assert (smp.table is None) == (not table)
    x = smp.sample(np.random.default_rng(7), 200_000).T
    assert np.all(x.sum(1) == 4) and x.min() >= 0
    pmf = _pmf(4, p)
    keys, counts = np.unique(x, axis=0, return_counts=True)
    seen = dict(zip(map(tuple, keys), counts))
    assert set(seen) <= set(pmf)
    obs = np.array([seen.get(k, 0) for k in pmf])
    exp = np.array([pmf[k] for k in pmf]) * x.shape[0]
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    mn._tables.cache_clear()


def test_sampler_moments_at_the_fig6_size():
    """n = 127 over the 20-token support of Syn-Medium: means n p and covariances n (diag p - p p^T)
    within Monte-Carlo error (100k draws)."""
    task = ss.make_task(ss.Config(num_last=1, num_next_per_last=2))
    p = task.P[0, task.support(0)]
    x = mn.MultinomialSampler(127, p).sample(np.random.default_rng(3), 100_000).T.astype(float)
    se = np.sqrt(127 * p * (1 - p) / x.shape[0])
    assert np.all(np.abs(x.mean(0) - 127 * p) < 5 * se)
    cov = 127 * (np.diag(p) - np.outer(p, p))
    # sample covariance error ~ sqrt(var_i var_j / N) (Gaussian approximation), 6 sigma
    tol = 6 * np.sqrt(np.outer(np.diag(cov), np.diag(cov)) / x.shape[0]) * math.sqrt(2)
    assert np.all(np.abs(np.cov(x.T) - cov) < tol)
