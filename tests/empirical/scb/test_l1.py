"""The SCB l1-vs-SGD runs (empirical/scb/l1.py): gradients, prox step and lr search checked against
independent computations (spec §2, §3.2, §3.5)."""

import numpy as np
import pytest
import torch

from empirical.scb import l1 as el1
from theory import scb


def _task(T=16, N=3, Q=2):
    return scb.make_task(scb.SCBConfig(N=N, T=T, Q=Q, task_seed=0))


def _init(task):
    return np.outer(task.mu, np.ones(task.N)), np.full((task.T, task.N), 1.0 / task.T)


def test_minibatch_gradient_matches_population_gradient():
    """Large-batch mean of the batched minibatch gradient (sampler + per-sample forms) vs the exact
    population gradient of spec §3.2 at a generic point (Monte-Carlo error ~2e-3)."""
    task = _task(T=8)
    rng = np.random.default_rng(1)
    V = task.P + 0.3 * rng.standard_normal((3, 3))
    A = task.Qm + 0.1 * rng.standard_normal((8, 3))
    gV_ref, gA_ref = scb.population_gradient(V, A, task)
    sampler = el1.BatchedSampler(task, [7], torch.device("cpu"))
    x, k, y = sampler.sample(400_000)
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)[None]  # noqa: E731
    gV, gA, _ = el1.minibatch_gradients(t(V), t(A), x, k, y)
    assert np.abs(gV[0].numpy() - gV_ref).max() < 0.012
    assert np.abs(gA[0].numpy() - gA_ref).max() < 0.012
    assert np.abs(gA_ref).max() > 0.05  # the comparison is not between two zeros


def test_prox_step_on_known_column_is_soft_threshold():
    """At V = mu 1^T with 1^T a_k = 1 the population attention gradient is exactly 0 (spec §3.2), so
    one l1 step is the pure prox: soft-threshold at lr*lam, closed form per entry."""
    task = _task(T=8)
    V0, A0 = _init(task)
    col = np.array([0.6, 0.5, -0.05, -0.15, 0.1, 0.0, 0.0, 0.0])  # sums to 1
    A0 = np.repeat(col[:, None], 3, axis=1)
    lr, lam = 0.05, 2.0  # threshold 0.1
    out = el1.train_runs(task, [el1.RunSpec("l1", lr, lam, 0)], batch=1, steps=1, log_every=1,
                         lam_switch=0.0, population=True, init=(V0, A0))
    expected = np.array([0.5, 0.4, 0.0, -0.05, 0.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(out["A"][0, -1], np.repeat(expected[:, None], 3, axis=1), atol=1e-12)
    assert out["nnz_max"][0, -1] == 3


def test_population_update_is_preconditioned_and_plain_gd():
    """One population step of each method vs the update written out from theory.population_gradient
    (l1 with lam=0: V - lr gV D^-1, A - lr gA/mu_k; sgd: no preconditioner)."""
    task = _task(T=8)
    rng = np.random.default_rng(3)
    V0 = task.P + 0.2 * rng.standard_normal((3, 3))
    A0 = task.Qm + 0.05 * rng.standard_normal((8, 3))
    gV, gA = scb.population_gradient(V0, A0, task)
    runs = [el1.RunSpec("l1", 0.1, 0.0, 0), el1.RunSpec("sgd", 0.1, 0.0, 0)]
    out = el1.train_runs(task, runs, batch=1, steps=1, log_every=1, population=True, init=(V0, A0))
    np.testing.assert_allclose(out["V"][0, -1], V0 - 0.1 * gV / task.mu[None, :], atol=1e-13)
    np.testing.assert_allclose(out["A"][0, -1], A0 - 0.1 * gA / task.mu[None, :], atol=1e-13)
    np.testing.assert_allclose(out["V"][1, -1], V0 - 0.1 * gV, atol=1e-13)
    np.testing.assert_allclose(out["A"][1, -1], A0 - 0.1 * gA, atol=1e-13)


def _independent_gd(task, method, lr, steps, seed):
    """Population GD written out here (no code shared with the trainer but the theory gradient),
    from a perturbed initialisation; returns the population losses."""
    V, A = _init(task)
    A = A * (1 + 0.1 * np.random.default_rng(seed).standard_normal(A.shape))
    pre = 1.0 if method == "sgd" else 1 / task.mu[None, :]
    losses = []
    with np.errstate(all="ignore"):
        for _ in range(steps):
            gV, gA = scb.population_gradient(V, A, task)
            V, A = V - lr * gV * pre, A - lr * gA * pre
            if method == "l1_proj":  # Decision 6 projection onto 1^T a_k = 1
                A = A + (1 - A.sum(0)) / task.T
            losses.append(float(scb.population_loss(V, A, task)))
    return np.array(losses)


@pytest.mark.parametrize("method", el1.METHODS)
def test_lr_search_brackets_divergence(method):
    """The minibatch search's lr_max: an independent population-GD run diverges (loss non-finite or
    above 1.5x its start) at 2*lr_max, and stays bounded and descends at the rate used, lr_max/sqrt(2) (one grid step back)."""
    task = _task(T=16)
    res = el1.largest_stable_lr(task, method, batch=64, seeds=(0, 1), horizon=150, lr_min=1e-3, n_grid=26)
    lr_max = res["lr_max"]
    assert np.isfinite(lr_max) and res["stable"][0] and not res["stable"].all()
    L0 = el1.initial_loss(task)
    hi = _independent_gd(task, method, 2 * lr_max, 400, seed=5)
    assert not np.all(np.isfinite(hi) & (hi < el1.STABLE_FACTOR * L0))
    assert np.isclose(res["lr"], lr_max / np.sqrt(2))
    lo = _independent_gd(task, method, res["lr"], 400, seed=5)
    assert np.all(np.isfinite(lo) & (lo < el1.STABLE_FACTOR * L0)) and lo[-1] < L0


def test_population_prox_recovers_exact_support():
    """Noise-free proximal map (spec §3.5): off-support attention becomes exactly 0 and the support
    equals the truth; without the prox (lam = 0) every entry stays non-zero."""
    task = _task(T=16)
    runs = [el1.RunSpec("l1", 0.05, 0.01, 0), el1.RunSpec("l1", 0.05, 0.0, 0)]
    out = el1.train_runs(task, runs, batch=1, steps=2500, log_every=2500, population=True)
    A = out["A"][0, -1]
    for k in range(task.N):
        assert set(np.flatnonzero(A[:, k])) == set(task.support[k])
    assert out["support"][0, -1] and out["nnz_max"][0, -1] == 2
    assert not out["support"][1, -1] and out["nnz_mean"][1, -1] == 16
    assert out["attention_distance_to_truth"][0, -1] < 1e-3  # uniform q: no l1 bias after normalisation
