"""SCB's batched runs (empirical/scb/l1.py): gradients and prox steps against independent
computations (docs/papers/scb.md §2, §3.2, §3.5), and ``train_seeds`` equal to the Trainer's per-seed runs."""

import numpy as np
import pytest
import torch

from empirical import scb as escb
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
    sampler = el1.SeedSampler(task, [7], torch.device("cpu"))
    x, k, y = sampler.sample(400_000)
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)[None]  # noqa: E731
    gV, gA, _ = el1.minibatch_gradients(t(V), t(A), x, k, y)
    assert np.abs(gV[0].numpy() - gV_ref).max() < 0.012
    assert np.abs(gA[0].numpy() - gA_ref).max() < 0.012
    assert np.abs(gA_ref).max() > 0.05  # the comparison is not between two zeros


def test_batched_population_gradients_equal_the_theory_formulas():
    """The torch formulas batched over runs equal theory.scb.population_gradient run by run
    (non-uniform q, generic points)."""
    task = scb.make_task(scb.SCBConfig(N=4, T=10, Q=3, attention="dirichlet", task_seed=2))
    rng = np.random.default_rng(0)
    Vs = task.P + 0.3 * rng.standard_normal((3, 4, 4))
    As = task.Qm + 0.1 * rng.standard_normal((3, 10, 4))
    f = lambda a: torch.as_tensor(np.asarray(a, dtype=float))  # noqa: E731
    gV, gA = el1.population_gradients(f(Vs), f(As), f(task.P), f(task.mu), f(task.Qm), f(task.Sigma))
    for r in range(3):
        ref_V, ref_A = scb.population_gradient(Vs[r], As[r], task)
        np.testing.assert_allclose(gV[r].numpy(), ref_V, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gA[r].numpy(), ref_A, rtol=1e-12, atol=1e-14)


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
    (l1 with lam=0: V - lr gV D^-1, A - lr gA/mu_k; sgd: no preconditioner), each run from its own
    start (per-run init)."""
    task = _task(T=8)
    rng = np.random.default_rng(3)
    V0 = task.P + 0.2 * rng.standard_normal((2, 3, 3))
    A0 = task.Qm + 0.05 * rng.standard_normal((2, 8, 3))
    runs = [el1.RunSpec("l1", 0.1, 0.0, 0), el1.RunSpec("sgd", 0.1, 0.0, 0)]
    out = el1.train_runs(task, runs, batch=1, steps=1, log_every=1, population=True, init=(V0, A0))
    gV, gA = scb.population_gradient(V0[0], A0[0], task)
    np.testing.assert_allclose(out["V"][0, -1], V0[0] - 0.1 * gV / task.mu[None, :], atol=1e-13)
    np.testing.assert_allclose(out["A"][0, -1], A0[0] - 0.1 * gA / task.mu[None, :], atol=1e-13)
    gV, gA = scb.population_gradient(V0[1], A0[1], task)
    np.testing.assert_allclose(out["V"][1, -1], V0[1] - 0.1 * gV, atol=1e-13)
    np.testing.assert_allclose(out["A"][1, -1], A0[1] - 0.1 * gA, atol=1e-13)
    with pytest.raises(Exception, match="init"):
        el1.train_runs(task, runs, batch=1, steps=1, log_every=1, population=True, init=(V0[:1], A0[:1]))


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
    assert out["attention_max_column_distance"][0, -1] < 1e-3


_BASE = dict(N=3, T=12, Q=2, eta_V=0.05, eta_A=0.05, batch=16, steps=60, log_every=7)


@pytest.mark.parametrize("setting", [
    dict(lam=0.05, lam_switch=0.5),                               # the l1 method, end-only normalisation
    dict(lam=0.02, lam_switch=0.5, normalise="step_before_prox"),  # projection, then the prox
    dict(variant="sgd"),                                          # vanilla SGD
    dict(init="uniform", query="last"),                           # V = 11^T/N, Decision 1 B
    dict(eta_A=0.1),                                              # V and A at their own learning rates
])
def test_train_seeds_equals_the_trainers_runs_seed_by_seed(setting):
    """Every seed of the batched run draws the same minibatches and takes the same steps as
    empirical.scb.train with that seed (closed-form gradients here, autograd there: equal to
    float64 rounding); the observables the Trainer logs are the same."""
    cfg = scb.SCBConfig(**{**_BASE, **setting})
    seeds = [0, 3, 11]
    b = el1.train_seeds(cfg, seeds=seeds)
    assert b.sizes["seed"] == 3 and b["seed"].values.tolist() == seeds
    for i, s in enumerate(seeds):
        tr, _ = escb.train(cfg, seed=s, device="cpu")
        np.testing.assert_array_equal(tr["time"].values, b["time"].values)
        shared = [k for k in tr.data_vars if k in b.data_vars]
        assert set(tr.data_vars) - set(shared) == {"minibatch_loss"}
        for k in shared:
            got = b[k].isel(seed=i).values if "seed" in b[k].dims else b[k].values
            np.testing.assert_allclose(got, tr[k].values, rtol=1e-11, atol=1e-13, err_msg=k)


def test_train_seeds_refuses_what_it_does_not_batch():
    from theory.errors import ConfigError

    with pytest.raises(ConfigError, match="normalise"):
        el1.train_seeds(scb.SCBConfig(**_BASE, lam=0.1, normalise="step"), seeds=[0])
    with pytest.raises(ConfigError, match="variant"):
        el1.train_seeds(scb.SCBConfig(**_BASE, variant="softmax"), seeds=[0])
    with pytest.raises(ConfigError, match="lr_V"):
        el1.RunSpec("l1", 0.1, 0.0, 0, lr_V=-1.0)
