"""The numba kernels of SCB SGD at scale (empirical/scb/kernels.py) against closed forms and torch
re-implementations (their equality with the update rule: test_update.py)."""

import numpy as np
import pytest
import torch

from empirical.scb import kernels as K


def _int_table(mu):
    from theory.counter_rng import int_alias_table

    return int_alias_table(mu)


@pytest.mark.parametrize("N", [2, 3, 7, 500])
def test_integer_alias_table_samples_mu_to_2_pow_minus_32(N):
    from theory.counter_rng import implied_distribution

    mu = np.random.default_rng(N).dirichlet(np.full(N, 0.5))
    thr, ali, nb = _int_table(mu)
    np.testing.assert_allclose(implied_distribution(thr, ali, nb, N), mu, rtol=0, atol=2.0**-32 * 2)


def test_forward_kernel_tokens_are_iid_mu_and_h_is_their_weighted_histogram():
    """Token frequencies and lag-1 pair frequencies (chi-square, 0.1% level) match iid mu; ``h`` is
    the scatter of the queries' attention rows over the drawn tokens; numbers do not depend on the
    thread count."""
    from scipy import stats
    import numba

    N, B, T = 5, 64, 4001
    rng = np.random.default_rng(0)
    mu = rng.dirichlet(np.ones(N))
    thr, ali, nb = _int_table(mu)
    At = rng.standard_normal((N, T))
    k = rng.integers(0, N, B)
    x, h = np.empty((B, T), np.int16), np.empty((B, N))
    K.forward_tokens(np.uint64(12345), k, At, thr, ali, nb, x, h)
    counts = np.bincount(x.ravel(), minlength=N)
    assert stats.chisquare(counts, mu * x.size).pvalue > 1e-3
    pairs = np.bincount((x[:, :-1].astype(int) * N + x[:, 1:]).ravel(), minlength=N * N)
    assert stats.chisquare(pairs, np.outer(mu, mu).ravel() * pairs.sum()).pvalue > 1e-3
    want = torch.zeros(B, N, dtype=torch.float64).scatter_add_(1, torch.from_numpy(x).long(),
                                                                torch.from_numpy(At[k])).numpy()
    np.testing.assert_allclose(h, want, rtol=1e-10, atol=1e-10)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        x1, h1 = np.empty_like(x), np.empty_like(h)
        K.forward_tokens(np.uint64(12345), k, At, thr, ali, nb, x1, h1)
    finally:
        numba.set_num_threads(old)
    np.testing.assert_array_equal(x1, x)
    np.testing.assert_array_equal(h1, h)
    K.kernel("forward_tokens", 0)(np.uint64(12345), k, At, thr, ali, nb, x1, h1)  # the serial twin
    np.testing.assert_array_equal(x1, x)
    np.testing.assert_array_equal(h1, h)


def test_attention_update_and_prox_kernels_equal_torch():
    rng = np.random.default_rng(2)
    N, B, T = 6, 40, 301
    At = rng.standard_normal((N, T))
    x = rng.integers(0, N, (B, T)).astype(np.int16)
    w = rng.standard_normal((B, N))
    k = torch.from_numpy(rng.integers(0, 4, B))
    rows, inv = torch.unique(k, return_inverse=True)
    scale = torch.from_numpy(rng.random(rows.numel()))
    gA = torch.zeros(rows.numel(), T, dtype=torch.float64).index_add_(
        0, inv, torch.from_numpy(w).gather(1, torch.from_numpy(x).long()))
    want = torch.from_numpy(At.copy())
    want[rows] -= scale[:, None] * gA
    order = torch.argsort(inv, stable=True).numpy()
    starts = np.concatenate([[0], np.cumsum(np.bincount(inv.numpy(), minlength=rows.numel()))])
    got = At.copy()
    K.attention_update(got, x, w, rows.numpy(), starts, order, scale.numpy())
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12)
    thr = 0.3
    st = torch.sign(want) * torch.clamp(want.abs() - thr, min=0.0)
    st_proj = st + (1.0 - st.sum(1, keepdim=True)) / T
    for project, ref in ((False, st), (True, st_proj)):
        a = want.numpy().copy()
        K.soft_threshold_project(a, thr, project)
        np.testing.assert_allclose(a, ref.numpy(), rtol=1e-12, atol=1e-12)
