"""SCB's minibatch noise derived from the squared loss of one sequence (theory/scb/derive.py §4,
theory.noise): the per-sample loss's expectation is the drift's population loss, the mean
per-sample flow is the drift (exact sums over the outcome tables; theory.noise.check_drift), the
derived flow equals the hand-written projection of today's engine and torch's per-sample
gradients, the samplers draw the tables' law, and the noise is exported.

Parameters of a valid task are tied (P column-stochastic, mu its stationary law, K = tr(P Sigma
P^T)): every check draws whole tasks (``_valid_parameters``), never independent values."""

import dataclasses
import json

import jax
import numpy as np
import pytest
import sympy as sp
import torch

import simulate
from helpers import scb_sde_reference as ref
from theory import load_system, scb
from theory.noise import check_drift, derive_noise, law_sampler
from theory.scb import derive as D
from theory.scb import sde as R

CFG = scb.SCBConfig(N=3, T=16, Q=2, eta_V=0.2, eta_A=0.2, batch=32)


@pytest.fixture(scope="module")
def task():
    return scb.make_task(CFG)


def _table(task):
    (p, F), = R.sample_tables(task)  # one joint table at N=3, T=16, Q=2
    return p, F


def _reduced_state(task, rng):
    N = task.N
    return np.concatenate([[rng.uniform(-0.5, 1.5), rng.uniform(0.5, 1.5)], 1 / task.T + 0.05 * rng.standard_normal(N),
                           rng.uniform(-0.5, 1.0, N)])


def _terms(task, y, F):
    """Derived (g (n, 2+2N), off (n, 2+N)) at reduced state ``y`` for features ``F`` (n, 4N)."""
    N = task.N
    pn = D.noise_system(N).parameter_vector(R.noise_parameters(task, CFG.eta_V, CFG.eta_A))
    vals = R._reduced_terms(N, "numpy")(tuple(y[:2 + 2 * N]), pn, [F[:, j] for j in range(4 * N)])
    V = np.stack([np.broadcast_to(np.asarray(v, float), (len(F),)) for v in vals], axis=1)
    return V[:, :2 + 2 * N], V[:, 2 + 2 * N:]


def _valid_parameters(N, T_, Q_, names="noise"):
    """``parameters(rng)`` for check_drift: a fresh random task (Dirichlet P, its stationary mu,
    uniform q) and learning rates, as the named system's parameter values."""
    def draw(rng):
        cfg = scb.SCBConfig(N=N, T=T_, Q=Q_, task_seed=int(rng.integers(1 << 30)))
        t = scb.make_task(cfg)
        lr_V, lr_A = rng.uniform(0.05, 0.5, 2)
        if names == "full":
            return R.full_parameters(t, lr_V, lr_A)
        return R.noise_parameters(t, lr_V, lr_A)
    return draw


def test_population_loss_is_the_expectation_of_the_per_sample_loss(task):
    """Summed exactly over the outcome table, the per-sample loss of one sequence on the manifold
    equals the general system's population loss (the loss its drift is derived from, by the
    moment identity) — to 1e-12, at random states."""
    N = task.N
    p, F = _table(task)
    S = D.noise_system(N)
    ell, _, _ = D._reduced_sample(N)
    samples = S.noise.samples
    f_ell = sp.lambdify((S.state, S.parameters, samples), ell, "numpy")
    f_L = sp.lambdify((S.state, S.parameters), S.expand_definitions(S.observables["population_loss"]), "numpy")
    pn = S.parameter_vector(R.noise_parameters(task, CFG.eta_V, CFG.eta_A))
    rng = np.random.default_rng(0)
    for _ in range(4):
        y = _reduced_state(task, rng)
        e = p @ np.asarray(f_ell(y, pn, [F[:, j] for j in range(4 * N)]))
        assert abs(e - f_L(y, pn)) < 1e-12 * max(1.0, abs(e))


def test_mean_per_sample_flow_is_the_drift_and_a_wrong_map_fails(task):
    """E_x[g] = rhs: exactly over the outcome table (1e-11) at random states, and by
    theory.noise.check_drift (Monte Carlo through the exported sampler, at random valid tasks).
    The planted error — the flow's map without the 1/mu_k of the attention preconditioner — fails."""
    N = task.N
    p, F = _table(task)
    S = D.noise_system(N)
    f = S.to_numpy()
    pn = S.parameter_vector(R.noise_parameters(task, CFG.eta_V, CFG.eta_A))
    rng = np.random.default_rng(1)
    for _ in range(4):
        y = _reduced_state(task, rng)
        g, _ = _terms(task, y, F)
        np.testing.assert_allclose(p @ g, f(0.0, y, pn), rtol=1e-11, atol=1e-13)
    valid = _valid_parameters(3, 16, 2)
    check = check_drift(S, points=3, parameters=valid)
    assert check.passed and check.max_rel_error <= 1e-10, check  # the law's closed-form mean, not Monte Carlo
    ell, _, _ = D._reduced_sample(N)
    wrong = D._reduced_preconditioner(N).subs({s: 1 for s in D._mus(N)})
    bad = derive_noise(ell, S.state, S.noise.samples, S.noise.distribution, preconditioner=wrong, simplify=False,
                       covariance=False)
    assert not check_drift(S, bad, points=2, parameters=valid).passed


def test_closed_form_law_gives_the_exact_covariance_of_the_outcome_tables():
    """The noise's law is exact and in closed form (its moment generating function): its mean is
    the drift and ``theory.noise.covariance_at`` (the covariance from the law's moments) equals
    ``Cov_x[g]`` summed over the exact outcome tables of the task (every query, support, target
    and count vector: an independent enumeration), to 1e-12 relative. A law with one off-support
    token too many (``T - Q + 1`` counts) misses it."""
    from theory.noise import Independent, Moments, covariance_at

    task = scb.make_task(scb.SCBConfig(N=2, T=8, Q=2))
    S = D.noise_system(2)
    assert S.noise.exact and S.noise.method == "moments" and S.noise.implicit_covariance
    model = R.ReducedMinibatchSDE(task, 0.2, 0.3, 32)
    pv = R.noise_parameters(task, 0.2, 0.3)
    y = np.array([0.6, 1.2, 0.1, 0.2, 0.7, -0.3, 0.0, 0.0, 0.0, 0.0])
    mean, cov, _ = model.exact_moments(y)
    state = dict(zip(S.state_names, y))
    got = covariance_at(S, state, pv)
    assert np.abs(got - cov).max() <= 1e-12 * np.abs(cov).max()
    np.testing.assert_allclose(S.to_numpy()(0.0, y[:6], S.parameter_vector(pv)), mean, rtol=1e-12, atol=1e-14)
    rest, query = S.noise.distribution.parts
    wrong = Moments(rest.variables, rest.mgf * sp.Add(*[m * sp.exp(t) for m, t in
                                                          zip(D._mus(2), rest.dummies[4:])]), rest.dummies)
    bad = dataclasses.replace(S, noise=dataclasses.replace(S.noise, distribution=Independent((wrong, query))))
    assert np.abs(covariance_at(bad, state, pv) - cov).max() > 1e-3 * np.abs(cov).max()


def test_derived_flow_equals_the_hand_written_projection(task):
    """The derived per-sample flow and off-manifold norms == today's engine's projection of the
    full per-sample gradient (tests/helpers/scb_sde_reference.py; the gradient there is -g)."""
    N = task.N
    p, F = _table(task)
    c = ref._constants(task, CFG.eta_V, CFG.eta_A, CFG.batch)
    rng = np.random.default_rng(2)
    y = np.concatenate([_reduced_state(task, rng), np.zeros(2 + N)])
    rows = F[rng.integers(len(F), size=12)]
    g, off = _terms(task, y, rows)
    for i, fm in enumerate(rows):
        g_ref, off_ref = ref.projected_per_sample(y, *np.split(fm, 4), c)
        np.testing.assert_allclose(g[i], -g_ref, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(off[i], off_ref, rtol=1e-9, atol=1e-13)


def test_closure_drift_is_the_hand_written_drift_and_the_general_system(task):
    """The derived closure (energies included) == today's hand-written reduced drift; at zero
    energies its reduced part == the general system."""
    N = task.N
    C = D.closure_system(N)
    G = D.general_system(N)
    p = C.parameter_vector(R.closure_parameters(task, CFG.eta_V, CFG.eta_A))
    rng = np.random.default_rng(3)
    for _ in range(3):
        y = np.concatenate([_reduced_state(task, rng), rng.uniform(0, 0.1, 2 + N)])
        np.testing.assert_allclose(C.to_numpy()(0.0, y, p), ref.reduced_drift_numpy(y, task, CFG.eta_V, CFG.eta_A),
                                   rtol=1e-10, atol=1e-14)
        y[2 + 2 * N:] = 0
        np.testing.assert_allclose(C.to_numpy()(0.0, y, p)[:2 + 2 * N], G.to_numpy()(0.0, y[:2 + 2 * N], p),
                                   rtol=1e-11, atol=1e-14)


def test_sampler_from_parameters_draws_the_tables_law(task):
    """draw_statistics (the sampler the export names) and the alias tables (the SDE's fast path)
    draw the same law: feature means and second moments within 4 SE of the exact table sums."""
    simulate.enable_x64()
    N = task.N
    p, F = _table(task)
    pn = jax.numpy.asarray(D.noise_system(N).parameter_vector(R.noise_parameters(task, CFG.eta_V, CFG.eta_A)))
    xs = R.draw_statistics(jax.random.key(0), 200_000, pn)
    X = np.stack([np.asarray(xs[str(s)]) for s in D.noise_system(N).noise.samples], axis=1)
    second = X[:, :, None] * X[:, None, :]
    for sample, exact in ((X, p @ F), (second, np.einsum("o,oi,oj->ij", p, F, F))):
        se = sample.std(0) / np.sqrt(len(X))
        assert np.all(np.abs(sample.mean(0) - exact) <= 4 * se + 1e-12)


def test_full_system_is_the_preconditioned_flow_and_its_noise_the_torch_gradients():
    """The full (V, A) system (N=3, T=6): its drift == theory.scb.preconditioned_flow (numpy,
    independent), E[g] = drift by check_drift at random valid tasks, and the derived per-sample flow
    of a drawn sequence == torch's per-sample gradient of the squared loss times -lr/mu."""
    cfg = scb.SCBConfig(N=3, T=6, Q=2, eta_V=0.3, eta_A=0.2)
    t = scb.make_task(cfg)
    S = D.full_system(3, 6)
    pv = S.parameter_vector(R.full_parameters(t, cfg.eta_V, cfg.eta_A))
    rng = np.random.default_rng(4)
    V, A = t.P + 0.2 * rng.standard_normal((3, 3)), t.Qm + 0.1 * rng.standard_normal((6, 3))
    y = np.concatenate([V.ravel(), A.ravel()])
    dV, dA = scb.preconditioned_flow(V, A, t, cfg.eta_V, cfg.eta_A)
    np.testing.assert_allclose(S.to_numpy()(0.0, y, pv), np.concatenate([dV.ravel(), dA.ravel()]), rtol=1e-10,
                               atol=1e-13)
    check = check_drift(S, points=3, mc_samples=20000, parameters=_valid_parameters(3, 6, 2, "full"))
    assert check.passed and check.max_z < 5, check
    simulate.enable_x64()
    xs = R.draw_sequences(jax.random.key(1), 16, jax.numpy.asarray(pv), N=3, T=6)
    cols = [np.asarray(xs[str(s)]) for s in S.noise.samples]
    g = np.stack([np.broadcast_to(np.asarray(v, float), (16,)) for v in
                  sp.lambdify((S.state, S.parameters, S.noise.samples), list(S.noise.gradient), "numpy")(y, pv, cols)],
                 axis=1)
    X = np.stack([np.asarray(xs[f"x_{tt + 1}_{i + 1}"]) for tt in range(6) for i in range(3)], 1).reshape(16, 6, 3)
    kk = np.stack([np.asarray(xs[f"kappa_{i + 1}"]) for i in range(3)], 1)
    yy = np.stack([np.asarray(xs[f"y_{i + 1}"]) for i in range(3)], 1)
    Vt, At = torch.tensor(V, requires_grad=True), torch.tensor(A, requires_grad=True)
    mu = torch.as_tensor(t.mu)
    for m in range(16):
        h = torch.as_tensor(X[m]).T @ At @ torch.as_tensor(kk[m])
        loss = 0.5 * ((torch.as_tensor(yy[m]) - Vt @ h) ** 2).sum()
        gV, gA = torch.autograd.grad(loss, (Vt, At))
        want = np.concatenate([(-cfg.eta_V * gV / mu).numpy().ravel(), (-cfg.eta_A * gA / mu).numpy().ravel()])
        np.testing.assert_allclose(g[m], want, rtol=1e-10, atol=1e-13)


def test_noise_is_exported_and_read_back():
    """`tdyn derive scb --format json` carries the minibatch system's noise; load_system reads it
    back, and its sampler (by reference) draws. The full system's sampler reference resolves too."""
    from click.testing import CliRunner

    from figures.cli import main
    from theory.refs import resolve_ref

    res = CliRunner().invoke(main, ["derive", "scb", "--format", "json", "--no-cache"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    S = load_system(doc, "minibatch")
    assert S.noise is not None and S.noise.method == "moments" and S.noise.exact and S.noise.implicit_covariance
    assert S.equivalent(D.noise_system(3))
    assert doc["systems"][3]["noise"]["distribution"]["sampler"] == "theory.scb.sde:draw_statistics"
    simulate.enable_x64()
    pn = jax.numpy.asarray(S.parameter_vector(R.noise_parameters(scb.make_task(scb.SCBConfig()), 0.1, 0.1)))
    xs = law_sampler(S.noise.distribution)(jax.random.key(0), 5, pn)
    assert set(xs) == {str(s) for s in S.noise.samples}
    draw = resolve_ref(D.full_system(3, 4).noise.distribution.ref)
    assert draw.keywords == {"N": 3, "T": 4}
