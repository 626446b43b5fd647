"""SCB's one update rule (empirical/scb/update.py) against the theory's discrete map, across array
modules, batched vs single runs, and against the numba kernels of the fast engine."""

import numpy as np
import pytest
import torch

from empirical.scb import update as U
from theory import scb


def _task(N=3, T=10, Q=2, attention="dirichlet", seed=4):
    return scb.make_task(scb.SCBConfig(N=N, T=T, Q=Q, attention=attention, task_seed=seed))


def _point(task, rng):
    V = task.P + 0.2 * rng.standard_normal((task.N, task.N))
    A = task.Qm + 0.05 * rng.standard_normal(task.Qm.shape)
    return V, A


def test_population_step_is_the_theory_discrete_map_bit_for_bit():
    """With the exact population gradient, one preconditioned proximal step is the theory's
    discrete map: ``V + dV``, ``soft_threshold(A + dA, eta_A lam)`` with ``(dV, dA)`` of
    ``theory.scb.preconditioned_flow`` (the same arithmetic, so exactly equal)."""
    task = _task()
    V, A = _point(task, np.random.default_rng(0))
    hy = U.Hyper(0.2, 0.3, precondition=True, lam=0.05, lam_switch=0.0)
    (V1, A1), state = U.update(scb.population_gradient(V, A, task), U.init((V, A)), (V, A), hyper=hy, mu=task.mu,
                               overlap=U.target_overlap(task.Qm))
    dV, dA = scb.preconditioned_flow(V, A, task, 0.2, 0.3)
    np.testing.assert_array_equal(V1, V + dV)
    np.testing.assert_array_equal(A1, scb.soft_threshold(A + dA, 0.3 * 0.05))
    assert state.lam_on is True and (A1 == 0).sum() > 0


def test_population_steps_follow_the_reduced_proximal_map():
    """Many population steps of the rule equal the reduced u-w proximal map derived in sympy
    (docs/papers/scb.md §3.3, non-uniform q, lambda > 0; the prox on from the start)."""
    N, Q_, T_ = 3, 3, 20
    task = _task(N=N, T=T_, Q=Q_, seed=11)
    Ls = scb.l1_general_system(N, Q_)
    step = scb.proximal_map(Ls)
    lam, eV, eA = 2e-3, 0.2, 0.05
    p = {"T": T_, "K": task.K, "m2": task.m2, "eta_V": eV, "eta_A": eA,
         **{f"mu_{k+1}": task.mu[k] for k in range(N)},
         **{f"qbar_{k+1}_{j+1}": task.Qm[task.support[k][j], k] for k in range(N) for j in range(Q_)}}
    pv = Ls.parameter_vector(p)
    V, A = scb.initial_parameters(task.config, task)
    y = np.concatenate([[0.0, 1.0], np.full(N * (Q_ + 1), 1.0 / T_)])
    hy = U.Hyper(eV, eA, precondition=True, lam=lam, lam_switch=0.0)
    state = U.init((V, A))
    for _ in range(2000):
        (V, A), state = U.update(scb.population_gradient(V, A, task), state, (V, A), hyper=hy, mu=task.mu,
                                 overlap=U.target_overlap(task.Qm))
        y = step(y, pv, lam)
    for k in range(N):
        off = np.setdiff1d(np.arange(T_), task.support[k])
        np.testing.assert_allclose(A[off, k], y[2 + k * (Q_ + 1)], atol=1e-10)
        np.testing.assert_allclose(A[task.support[k], k], y[3 + k * (Q_ + 1): 3 + k * (Q_ + 1) + Q_], atol=1e-10)
    assert abs(scb.observables_from_parameters(V, A, task)["value_transition_correlation"] - y[0]) < 1e-10


@pytest.mark.parametrize("hy", [U.Hyper(0.1, 0.2, True, 0.03, 0.5, project=True),
                                U.Hyper(0.1, 0.2, True, 0.03, 0.5, project=True, project_before_prox=True),
                                U.Hyper(0.1, 0.7, False)])
def test_numpy_and_torch_take_the_same_step(hy):
    task = _task()
    rng = np.random.default_rng(1)
    V, A = _point(task, rng)
    G = (rng.standard_normal(V.shape), rng.standard_normal(A.shape))
    (Vn, An), sn = U.update(G, U.init((V, A)), (V, A), hyper=hy, mu=task.mu, overlap=U.target_overlap(task.Qm))
    t = torch.as_tensor
    (Vt, At), st = U.update(tuple(map(t, G)), U.init((t(V), t(A)), xp=torch), (t(V), t(A)), hyper=hy,
                            mu=t(task.mu), overlap=U.target_overlap(t(task.Qm)), xp=torch)
    np.testing.assert_allclose(Vt.numpy(), Vn, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(At.numpy(), An, rtol=1e-14, atol=1e-15)
    assert sn.lam_on == st.lam_on


def test_batched_runs_step_as_each_run_alone():
    """R runs in one tensor with per-run hyper-parameters (the l1 study) = each run stepped alone
    with scalar hyper-parameters: l1, l1 with the projection before the prox, l1 before its switch,
    plain SGD."""
    task = _task(T=12)
    rng = np.random.default_rng(2)
    specs = [dict(lr=0.05, pre=True, lam=0.02, proj=False), dict(lr=0.08, pre=True, lam=0.02, proj=True),
             dict(lr=0.05, pre=True, lam=0.01, proj=False), dict(lr=0.1, pre=False, lam=0.0, proj=False)]
    V = np.stack([_point(task, rng)[0] for _ in specs])
    A = np.stack([_point(task, rng)[1] for _ in specs])
    G = (rng.standard_normal(V.shape), rng.standard_normal(A.shape))
    A[2], G[1][2] = 1.0 / task.T, 1e-3 * G[1][2]  # uniform attention: mean <a,q> T ~ 1 < lam_switch, stays off
    t = torch.as_tensor
    col = lambda key, **kw: t([s[key] for s in specs], **kw)  # noqa: E731
    f64 = dict(dtype=torch.float64)
    hy = U.Hyper(col("lr", **f64), col("lr", **f64), col("pre"), col("lam", **f64), 1.5, col("proj"),
                 project_before_prox=True)
    (Vb, Ab), sb = U.update(tuple(map(t, G)), U.init((t(V), t(A)), xp=torch), (t(V), t(A)), hyper=hy,
                            mu=t(task.mu), overlap=U.target_overlap(t(task.Qm)), xp=torch)
    for r, s in enumerate(specs):
        h1 = U.Hyper(s["lr"], s["lr"], s["pre"], s["lam"], 1.5, s["proj"], project_before_prox=True)
        (V1, A1), s1 = U.update((G[0][r], G[1][r]), U.init((V[r], A[r])), (V[r], A[r]), hyper=h1, mu=task.mu,
                                overlap=U.target_overlap(task.Qm))
        np.testing.assert_allclose(Vb[r].numpy(), V1, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(Ab[r].numpy(), A1, rtol=1e-14, atol=1e-15)
        assert bool(sb.lam_on[r]) == s1.lam_on
    assert sb.lam_on.tolist() == [True, True, False, False]


def test_switch_turns_on_at_the_level_and_stays_on():
    """Decision 7 on a hand-made attention a_k = 0.15/T + 0.1 q_k (uniform q, rho = 1/Q): the prox
    switches on exactly when lam_switch <= mean_k <a_k, q_k> T = 0.15 + 0.1 T rho."""
    task = _task(T=10, attention="uniform")
    A = np.full((task.T, task.N), 0.15 / task.T) + 0.1 * task.Qm
    c = (A * task.Qm).sum(0)
    level = 0.15 + 0.1 * task.T / task.support.shape[1]
    assert np.isclose(c.mean() * task.T, level, rtol=1e-14)
    hy = lambda s, lam=0.1, pre=True: U.Hyper(0.1, 0.1, pre, lam, s)  # noqa: E731
    assert U.switch_on(False, hy(level - 1e-9), c, task.T) is True
    assert U.switch_on(False, hy(level + 1e-9), c, task.T) is False
    assert U.switch_on(True, hy(level + 1e-9), c, task.T) is True  # once on, for good
    assert U.switch_on(False, hy(level - 1e-9, lam=0.0), c, task.T) is False  # no l1: nothing to switch
    assert U.switch_on(False, hy(level - 1e-9, pre=False), c, task.T) is False  # plain SGD has no prox
    assert U.threshold(hy(0.0), True) == pytest.approx(0.01) and U.threshold(hy(0.0), False) == 0.0


def test_hyper_of_each_variant():
    cfg = scb.SCBConfig(T=8, eta_V=0.1, eta_A=0.02, lam=0.5, lam_switch=1.0, normalise="step")
    assert U.hyper(cfg, 8) == U.Hyper(0.1, 0.02, True, 0.5, 1.0, True)
    cfg = scb.SCBConfig(variant="softmax", T=8, eta_V=0.1, eta_A=0.02, softmax_lr_power=1.5)
    assert U.hyper(cfg, 8) == U.Hyper(0.1, 0.02 * 8**1.5, False)
    assert U.hyper(scb.SCBConfig(variant="sgd", T=8, eta_V=0.1, eta_A=0.02), 8) == U.Hyper(0.1, 0.02, False)


@pytest.mark.parametrize("project", [False, True])
def test_numba_kernels_equal_the_rule(project):
    """The fast engine's numba path — kernels ``attention_update`` (gradient step of the rows of
    the queries present) and ``soft_threshold_project`` (prox, then projection) around the rule's
    ``descend`` and ``switch_on`` — equals :func:`update` on the dense gradient."""
    from empirical.scb import kernels as K

    task = _task(N=5, T=40, Q=3, seed=6)
    rng = np.random.default_rng(3)
    B = 16
    V, A = _point(task, rng)
    x = rng.choice(task.N, size=(B, task.T), p=task.mu).astype(np.int16)
    k = rng.choice(4, size=B)  # query 4 absent from the batch: its row must not move
    w, gV = rng.standard_normal((B, task.N)) / B, rng.standard_normal(V.shape)
    gA = np.zeros_like(A)
    for b in range(B):
        gA[:, k[b]] += w[b, x[b].astype(int)]
    hy = U.Hyper(0.2, 0.3, True, lam=0.05, lam_switch=0.0, project=project)
    (V1, A1), s1 = U.update((gV, gA), U.init((V, A)), (V, A), hyper=hy, mu=task.mu, overlap=U.target_overlap(task.Qm))
    # the numba path, as empirical.scb.fast runs it
    kt = torch.as_tensor(k)
    rows, inv = torch.unique(kt, return_inverse=True)
    order = torch.argsort(inv, stable=True).numpy()
    starts = np.concatenate([[0], np.cumsum(np.bincount(inv.numpy(), minlength=rows.numel()))])
    At = np.ascontiguousarray(A.T)
    K.attention_update(At, x, w, rows.numpy(), starts, order, hy.lr_A / task.mu[rows.numpy()])
    lam_on = U.switch_on(False, hy, (At.T * task.Qm).sum(0), task.T)
    K.soft_threshold_project(At, float(U.threshold(hy, lam_on)), bool(hy.project))
    V2 = U.descend(V, gV, hy.lr_V, hy.precondition, task.mu)
    np.testing.assert_array_equal(V2, V1)
    np.testing.assert_allclose(At.T, A1, rtol=1e-12, atol=1e-14)
    assert lam_on == s1.lam_on
    assert project or (A1 == 0).sum() > 0  # the prox acted (the projection fills the zeros)
