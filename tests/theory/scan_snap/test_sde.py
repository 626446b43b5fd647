"""Scan & Snap's minibatch SDE (theory/scan_snap/{derive,sde}.py).

References are independent of the derivation: ``jax.grad`` of the full-parameter objective
(``theory.scan_snap.objective``, numpy/jax code written from docs/papers/scan_snap.md §2.2) on the count vectors of one
sequence, projected on the symmetric subspace; the ``T = inf`` flow; the compiled count-vector SGD
(``empirical.scan_snap.fast``). Small layouts (3 distinct and 2 common tokens) keep the expanded
per-sample flow small.
"""

import json

import numpy as np
import pytest
import sympy as sp
from click.testing import CliRunner

import simulate
from helpers.moments import moment_z_scores
from theory import ConfigError
from theory import scan_snap as ss
from theory.noise import Finite, check_drift, derive_noise, step_time
from theory.scan_snap import derive as D
from theory.scan_snap import sde as S

SMALL = ss.Config(num_unique_per_next=3, num_common=2, T=32, batch=16, momentum=0.0, steps=10, log_every=2,
                  eta_Y=1.3, eta_Z=0.7, zero_init=True)


def _point(cfg, rng, scale=0.6):
    return rng.normal(size=len(ss.full_system(cfg).state)) * scale


def _group_indicators(task, cfg) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per symmetric coordinate: the indicator (Y, Z) of the entries it stands for."""
    dim = len(ss.full_system(cfg).state)
    Y0, Z0 = ss.embed_symmetric_state(task, np.zeros(dim))
    out = []
    for i in range(dim):
        Y, Z = ss.embed_symmetric_state(task, np.eye(dim)[i])
        out.append((Y - Y0, Z - Z0))
    return out


def _projected_full_gradients(cfg, y, counts, classes):
    """Per sequence: the rates times the group sums of ``jax.grad`` of the full objective ``J``
    (spec §2.2, one sequence of class ``n`` with context counts ``counts``) at the embedded state,
    divided by the group sizes — the per-sample flow on the subspace, computed without sympy."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    task = ss.make_task(cfg)
    Y, Z = ss.embed_symmetric_state(task, y)
    lay = D.symmetric_layout(cfg.num_unique_per_next, cfg.num_common > 0, cfg.K > 1)
    size = {"K": cfg.K, "R": task.M_out - cfg.K, "C": cfg.num_common, "N_q": cfg.num_last}
    weights = [float(w.subs({sp.Symbol(k, positive=True): v for k, v in size.items()})) for w in lay.weights]
    rates = [cfg.eta_Y if str(r) == "eta_Y" else cfg.eta_Z for r in lay.rates]
    ind = _group_indicators(task, cfg)
    grad = jax.jit(jax.grad(ss.count_vector_objective, argnums=(0, 1)))
    out = []
    for c, n in zip(counts, classes):
        w = np.zeros((1, task.M_in))
        w[0, task.support(n)] = c
        gY, gZ = grad(jnp.asarray(Y), jnp.asarray(Z), jnp.asarray(w), jnp.asarray([n]), jnp.asarray(task.query),
                      jnp.asarray(task.label))
        gY, gZ = np.asarray(gY), np.asarray(gZ)
        out.append([r / wt * ((gY * iY).sum() + (gZ * iZ).sum()) for (iY, iZ), r, wt in zip(ind, rates, weights)])
    return np.array(out)


def test_per_sample_flow_is_the_projected_gradient_of_the_full_objective():
    """For every sequence (any class, any counts) the derived per-sample flow equals the group-
    averaged gradient of the full objective of that one sequence (jax.grad, spec §2.2), to
    round-off: the noise lives on the subspace and every class gives the same flow there."""
    rng = np.random.default_rng(0)
    p, C, _ = S._profile(SMALL)
    for _ in range(2):
        y = _point(SMALL, rng)
        counts = rng.multinomial(SMALL.T - 1, p, size=6)
        classes = rng.integers(0, SMALL.K, 6)
        want = _projected_full_gradients(SMALL, y, counts, classes)
        X = S.count_statistics(counts, SMALL.T, C)
        got = S.per_sample_flows(SMALL, y, X)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_per_sample_loss_at_P_is_the_T_inf_objective_and_its_flow_the_derived_rhs():
    """l(theta; q = P) = -J_inf and g(theta; P) = the T = inf rhs (the same expression the drift
    is derived from): check_drift of theory.noise with the point mass at q = P passes."""
    cfg = SMALL
    sysm = ss.full_system(cfg)
    q = ss.sample_symbols(cfg.num_unique_per_next, True)
    lay = D.symmetric_layout(cfg.num_unique_per_next, True, True)
    params = ss.full_parameters(cfg)
    point = Finite(({s: sp.Float(v) for s, v in zip(q, S.population_statistics(cfg))},), (1,))
    noise = derive_noise(ss.per_sample_loss(cfg), sysm.state, q, point, simplify=False,
                         preconditioner=[r / w for r, w in zip(lay.rates, lay.weights)])
    chk = check_drift(sysm, noise, points=2, ranges={k: (v, v) for k, v in params.items()})
    assert chk.passed and chk.max_rel_error < 1e-12, chk
    rng = np.random.default_rng(1)
    obs = sysm.observables_numpy()
    ell = sp.lambdify((sysm.state, sysm.parameters, q), ss.per_sample_loss(cfg), "numpy")
    pv = sysm.parameter_vector(params)
    for _ in range(3):
        y = _point(cfg, rng)
        np.testing.assert_allclose(ell(y, pv, S.population_statistics(cfg)), obs(y[None], pv)["population_loss"][0],
                                   rtol=1e-12)


def test_exported_noise_gradient_is_the_per_sample_system():
    """theory.noise's expanded per-sample flow (what tdyn derive exports) equals the per-sample
    system the SDE evaluates (named quantities kept), and the exported noise is exact Monte Carlo."""
    sysm = ss.full_system(SMALL, noise=True)
    noise = sysm.noise
    assert noise.method == "monte_carlo" and noise.covariance is None and noise.mean is None
    assert r"$E_q[g(\theta; q)]$" in noise.description and "not this system's rhs" in noise.description
    assert "no closed form" in noise.description and not noise.exact
    f = sp.lambdify((sysm.state, sysm.parameters, noise.samples), list(noise.gradient), "numpy")
    rng = np.random.default_rng(2)
    pv = sysm.parameter_vector(ss.full_parameters(SMALL))
    X = S.draw_statistics(SMALL, 4, rng)
    for x in X:
        y = _point(SMALL, rng)
        np.testing.assert_allclose(np.asarray(f(y, pv, x), float), S.per_sample_flows(SMALL, y, x)[0],
                                   rtol=1e-10, atol=1e-13)


def test_monte_carlo_sampler_is_the_multinomial_and_the_drift_is_not_the_T_inf_flow():
    """The jax sampler's statistics have the multinomial's moments; check_drift with it holds the
    Monte-Carlo mean of g against the T = inf rhs and fails at T = 32 (|z| >> 5: the finite-T flow
    differs by O(1/T)), while the same mean agrees with the finite-T flow of independent draws."""
    import jax

    cfg = SMALL
    sysm = ss.full_system(cfg, noise=True)
    pv = sysm.parameter_vector(ss.full_parameters(cfg))
    draws = [S.count_sampler(jax.random.key(i), 5000, pv) for i in range(4)]  # n as check_drift's: one compilation
    X = np.concatenate([np.stack([np.asarray(d[str(s)]) for s in sysm.noise.samples], 1) for d in draws])
    ref = S.draw_statistics(cfg, 20000, np.random.default_rng(3))
    for j in range(X.shape[1]):
        z_mean, z_var = moment_z_scores(X[:, j], ref[:, j])
        assert abs(z_mean) < 4.5 and abs(z_var) < 4.5, (j, z_mean, z_var)
    ranges = {k: (v, v) for k, v in ss.full_parameters(cfg).items()}
    chk = check_drift(sysm, points=2, ranges=ranges, mc_samples=5000)
    assert not chk.passed and chk.max_z > 20
    y = np.random.default_rng(4).normal(size=len(sysm.state)) * 0.6
    b_T = S.finite_T_flow(cfg, y, S.draw_statistics(cfg, 200000, np.random.default_rng(5)))
    b_inf = sysm.to_numpy()(0.0, y, pv)
    G = S.per_sample_flows(cfg, y, X)
    mc, se = G.mean(0), G.std(0) / np.sqrt(len(X)) + 1e-15
    assert np.max(np.abs(mc - b_T) / se) < 5
    assert np.max(np.abs(b_T - b_inf) / se) > 20


def test_the_models_one_step_moves_like_one_count_vector_sgd_step():
    """From a symmetric state, one Euler step of the SDE (h = dtau) has the mean (dtau b_T) and the
    variances (dtau^2 Cov_q[g]/B) of one real count-vector SGD step projected on the subspace
    (SGD: empirical.scan_snap.fast, 3000 runs); dropping 1/B (a planted scaling bug) is caught."""
    from empirical.scan_snap.fast import CountSGD, symmetric_observables

    cfg = SMALL
    task = ss.make_task(cfg)
    rng = np.random.default_rng(6)
    y0 = _point(cfg, rng, 0.4)
    names = ss.full_system(cfg).state_names
    R = 3000
    Y, Z = ss.embed_symmetric_state(task, y0)
    eng = CountSGD(task, [cfg.eta_Y] * R, [cfg.eta_Z] * R, batch=cfg.batch, momentum=0.0, zero_init=True,
                   rng=np.random.default_rng(7))
    eng.Y[:], eng.Z[:] = Y, Z
    eng.step()
    after = symmetric_observables(task, eng.Y, eng.Z)
    sgd = np.stack([after[n] for n in names], 1) - y0
    model = S.count_sde(cfg, t=np.array([0.0, 1.0]), y0=y0, draws=200000)  # reference error < the test's SE / 3
    assert model.dt == step_time(cfg) == 1.0
    tr = simulate.solve_sde(model, np.array([0.0, 1.0]), paths=6000, seed=1)
    sde = np.stack([tr[n].values[:, 1] for n in names], 1) - y0
    for j in range(len(names)):
        z_mean, z_var = moment_z_scores(sde[:, j], sgd[:, j])
        assert abs(z_mean) < 4.5 and abs(z_var) < 4.5, (names[j], z_mean, z_var)
    bad = S.CountSDE(model.layout, model.samples, cfg, model.reference, model.pool, model.step_time, 1, model.dt)
    tr = simulate.solve_sde(bad, np.array([0.0, 1.0]), paths=6000, seed=1)
    sde_bad = np.stack([tr[n].values[:, 1] for n in names], 1) - y0
    assert max(abs(moment_z_scores(sde_bad[:, j], sgd[:, j])[1]) for j in range(len(names))) > 20


def test_models_of_one_layout_share_one_compilation_and_bad_settings_are_refused():
    a = S.count_sde(SMALL, t=np.array([0.0, 2.0]))
    b = S.count_sde(SMALL.replace(T=64, batch=8), t=np.array([0.0, 2.0]))
    assert a == b and hash(a) == hash(b) and a.args()["scale"] != b.args()["scale"]
    assert a != S.count_sde(SMALL.replace(num_unique_per_next=4), t=np.array([0.0, 2.0]))
    with pytest.raises(ConfigError, match="zero_init"):
        S.count_sde(SMALL.replace(zero_init=False))
    with pytest.raises(ConfigError, match="optimizer"):
        S.count_sde(SMALL.replace(optimizer="adam"))
    assert S.default_dt(SMALL.replace(momentum=0.9)) == pytest.approx(1.0)


def test_cli_simulate_sde_writes_path_time_on_ode_times(tmp_path):
    from figures.cli import main

    out = tmp_path / "f.nc"
    sets = ["num_unique_per_next=3", "num_common=2", "steps=8", "log_every=2", "T=32", "momentum=0"]
    res = CliRunner().invoke(main, ["simulate", "scan-snap", "--sde", "--paths", "256", "--out", str(out),
                                    *(a for s in sets for a in ("--set", s))])
    assert res.exit_code == 0, res.output
    ens = simulate.load(out)
    assert ens["dt_entropy"].dims == ("path", "time") and ens.sizes["path"] == 256
    cfg = ss.Config().with_overrides(sets)
    np.testing.assert_array_equal(ens["time"].values, cfg.ode_times())
    assert json.loads(ens.attrs["parameter_values"])["T"] == 32


def test_a_finer_euler_step_keeps_the_reference_of_one_optimiser_step():
    """``count_sde(dt=...)`` refines only the paths' Euler step (the SDE's own limit, SVAG): the
    reference stays on the grid of one optimiser step (the same seeded path), interpolated between."""
    t = np.array([0.0, 2.0, 4.0])
    a, b = S.count_sde(SMALL, t=t, draws=256), S.count_sde(SMALL, t=t, draws=256, dt=0.25)
    assert a.dt == 1.0 and b.dt == 0.25
    np.testing.assert_array_equal(a.reference.t, [0.0, 1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(b.reference.t, a.reference.t)
    np.testing.assert_array_equal(b.reference.y, a.reference.y)
    with pytest.raises(ConfigError, match="dt"):
        S.count_sde(SMALL, t=t, dt=0.0)
