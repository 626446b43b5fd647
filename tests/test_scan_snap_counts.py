"""The count-vector engine's pieces: the exact multinomial sampler (alias-table binomial tree, and
its Generator.binomial fallback) against the multinomial law, and divergence reporting."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from empirical import multinomial as mn
from empirical.scan_snap.fast import Batch, CountSGD
from theory import scan_snap as ss
from theory.errors import DivergenceError


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


def test_engine_reports_divergence_with_its_step():
    task = ss.make_task(ss.Config(T=32))
    eng = CountSGD(task, [1e6], [1e6], batch=8, momentum=0.9, zero_init=False, rng=np.random.default_rng(0))
    with pytest.raises(DivergenceError) as e:
        eng.run(200)
    assert 0 < e.value.step < 200 and e.value.step == eng.steps_done


def test_float32_engine_gradient_is_the_float64_one_rounded():
    """Quick Fig. 6 runs the engine in float32: on the same batch and parameters its gradient is the
    float64 gradient to float32 round-off."""
    task = ss.make_task(ss.Config(num_last=2, num_next_per_last=2, T=64))
    e64 = CountSGD(task, [1.0], [1.0], batch=32, momentum=0.9, zero_init=False, rng=np.random.default_rng(0))
    e32 = CountSGD(task, [1.0], [1.0], batch=32, momentum=0.9, zero_init=False, rng=np.random.default_rng(0),
                   dtype=np.float32)
    e64.Y += np.random.default_rng(1).normal(size=e64.Y.shape)
    e32.Y[...], e32.Z[...] = e64.Y, e64.Z
    batch = e64.sample()
    b32 = Batch(batch.m, batch.counts.astype(np.float32), batch.mask.astype(np.float32))
    g64, g32 = e64.gradient(batch), e32.gradient(b32)
    for a, b in zip(g64, g32):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6 * np.abs(a).max())


def test_engine_refuses_a_layout_it_does_not_implement():
    import dataclasses

    task = ss.make_task(ss.Config())
    P = task.P.copy()
    P[1, task.dt[1]] = P[1, task.dt[1]][::-1]  # class 1's distinct-token profile reversed
    with pytest.raises(ValueError, match="one support distribution"):
        CountSGD(dataclasses.replace(task, P=P), [1.0], [1.0], batch=4, momentum=0.9, zero_init=True,
                 rng=np.random.default_rng(0))
