"""theory/noise_sde.py: the generic minibatch SDE of a derived noise. Its one-step increments have
covariance Δτ Σ h (against the symbolic covariance, within Monte-Carlo error), one SDE step of
size Δτ moves like one real SGD step (the tiny paper's torch model; the toy's numpy SGD) — and a
planted time-scaling bug (lr² or Δτ forgotten) is caught —, the numba step equals the jax step,
and the CLI writes (path, time) on config.ode_times()."""

import json

import numpy as np
import pytest
import sympy as sp
import torch
from click.testing import CliRunner

import simulate
from tiny import ROW
from tiny.empirical.experiment import TinyExperiment
from tiny.theory import TinyConfig, systems
from tiny.theory import sde as tiny_sde
from helpers import linreg_toy as toy
from helpers.moments import moment_z_scores
from theory.noise_sde import NoiseSDE, SampledNoiseSDE, noise_sde
from theory import ConfigError, Problem, ReducedSystem
from theory.noise import Noise


def _increments(model, y0, h, paths, seed=0, backend="jax", chunk=None):
    """(paths, dim) increments of one Euler–Maruyama step of size ``h`` from ``y0``."""
    tr = simulate.solve_sde(model, np.array([0.0, h]), paths=paths, seed=seed, dt=h, y0=y0, keep_state=False,
                            backend=backend, chunk=chunk)
    Y = np.stack([tr[n].values for n in model.system.state_names], axis=-1)  # (paths, 2, dim)
    return Y[:, 1] - Y[:, 0]


def _entry_z(D: np.ndarray, C: np.ndarray) -> np.ndarray:
    """|z| of the sample covariance entries of the rows of ``D`` against ``C`` (fourth-moment SE)."""
    n = D.shape[0]
    E = D - D.mean(0)
    P = E[:, :, None] * E[:, None, :]
    return np.abs(P.mean(0) * n / (n - 1) - C) / (P.std(0, ddof=1) / np.sqrt(n))


def _sigma(system, y, config):
    """Δτ Cov_x[g] / B from the symbolic covariance (numpy; independent of the model's factor)."""
    f = sp.lambdify((system.state, system.parameters), system.noise.covariance, "numpy")
    p = system.parameter_vector(config.params if hasattr(config, "params") else {"p": config.p, "lr": config.lr})
    from theory.noise import step_time

    return step_time(config) * np.asarray(f(np.asarray(y, float), p), float) / config.batch


@pytest.mark.parametrize("factor,backend", [("ldl", "jax"), ("cholesky", "jax"), ("eigh", "jax"), ("ldl", "numba"),
                                            ("eigh", "numba")])
def test_linreg_increment_covariance_is_sigma_dt(factor, backend):
    cfg = toy.LinRegConfig(lr=0.3, batch=3)
    model, _ = noise_sde(toy.problem(cfg), factor=factor)
    assert noise_sde(toy.problem(cfg))[0].factor == "ldl"  # the default for a closed-form covariance
    y0, h = np.array([2.0, 0.5]), 0.01
    # one chunk for jax's LAPACK eigh (it deadlocked on threads; theory/noise_sde.py)
    D = _increments(model, y0, h, 40000, seed=1, backend=backend, chunk=40000 if factor == "eigh" else None)
    C = _sigma(model.system, y0, cfg) * h
    assert _entry_z(D, C).max() < 4.5
    drift = model.system.to_numpy()(0.0, y0, model.system.parameter_vector(cfg.params)) * h
    assert np.all(np.abs(D.mean(0) - drift) < 4.5 * D.std(0) / np.sqrt(len(D)))


@pytest.mark.parametrize("backend", ["jax", "numba"])
def test_tiny_outcome_factor_increment_covariance(backend):
    cfg = TinyConfig(lr=0.5, batch=4)
    model, t = tiny_sde(cfg)
    assert model.factor == "outcomes" and model.noise_dim == 2 and model.dt == 1.0
    D = _increments(model, np.array([0.7]), 0.25, 40000, seed=2, backend=backend)
    var = cfg.lr**2 * cfg.p * (1 - cfg.p) / cfg.batch * 1.0 * 0.25  # lr^2 p(1-p)/B * Δτ * h
    assert abs(D.var(ddof=1) - var) < 4.5 * np.sqrt(2 / len(D)) * var


def test_monte_carlo_factor_increment_covariance():
    cfg = toy.LinRegConfig(lr=0.3, batch=3)
    model, _ = noise_sde(toy.problem(cfg, toy.monte_carlo_system()), mc_samples=8)
    assert isinstance(model, SampledNoiseSDE) and model.factor == "samples" and model.noise_dim == 8
    y0, h = np.array([2.0, 0.5]), 0.01
    D = _increments(model, y0, h, 40000, seed=3)
    assert _entry_z(D, _sigma(toy.system(), y0, cfg) * h).max() < 4.5
    with pytest.raises(ConfigError, match="milstein"):
        simulate.solve_sde(model, np.array([0.0, h]), paths=8, method="milstein")


# -- time scaling against real SGD -----------------------------------------------------------------
class _ForgotLr2(NoiseSDE):
    """Planted bug: the diffusion built from Cov[∇ℓ]/B (the learning rate squared left out)."""

    def args(self):
        a = super().args()
        return {**a, "scale": a["scale"] / self.params["lr"]}


def _tiny_sgd_steps(cfg, a0, seeds):
    """One real SGD step of the tiny paper's torch model per seed: the displacement of ``a``."""
    out = []
    for s in range(seeds):
        exp = TinyExperiment(cfg.replace(a0=a0))
        exp.setup("cpu", torch.Generator().manual_seed(s))
        exp.step(0)
        out.append(exp.observables()["a"] - a0)
    return np.array(out)


def test_one_sde_step_moves_like_one_real_sgd_step_and_forgotten_lr2_is_caught():
    cfg = TinyConfig(lr=0.5, batch=4)
    a0 = 0.3
    sgd = _tiny_sgd_steps(cfg, a0, 1500)
    model, _ = tiny_sde(cfg)
    sde = _increments(model, np.array([a0]), model.dt, 20000, seed=4)[:, 0]
    z_mean, z_var = moment_z_scores(sde, sgd)
    assert abs(z_mean) < 4 and abs(z_var) < 4
    bad = _ForgotLr2(model.system, model.params, model.y0, model.step_time, model.batch, model.factor)
    sde_bad = _increments(bad, np.array([a0]), bad.dt, 20000, seed=4)[:, 0]
    assert abs(moment_z_scores(sde_bad, sgd)[1]) > 10


def test_toy_second_moment_tracks_real_sgd_and_the_sde_moment_ode():
    """Time = lr*step: EM with dt = Δτ reproduces SGD's second-moment recursion exactly, and a fine
    step the SDE's moment ODE; dropping Δτ from the diffusion (planted: step_time = 1) is caught."""
    cfg = toy.LinRegConfig(lr=0.25, batch=2, steps=12, log_every=3, noise=1.0)
    model, t = noise_sde(toy.problem(cfg))
    np.testing.assert_array_equal(t, cfg.ode_times())
    paths = 20000
    coarse = simulate.solve_sde(model, t, paths=paths, seed=5)  # dt = model.dt = Δτ
    fine = simulate.solve_sde(model, t, paths=paths, seed=6, dt=model.dt / 32)
    for ens, exact in ((coarse, toy.second_moment_sgd(cfg)), (fine, toy.second_moment_sde(cfg))):
        e = ens["err2"].values
        se = e.std(0, ddof=1) / np.sqrt(paths)
        assert np.all(np.abs(e.mean(0) - exact)[1:] < 4.5 * se[1:])
    real = toy.sgd(cfg, 20000, seed=7)
    err_sgd = ((real - [cfg.wstar1, cfg.wstar2]) ** 2).sum(-1)
    assert np.abs(err_sgd.mean(0) - toy.second_moment_sgd(cfg))[1:].max() < 4.5 * err_sgd.std(0).max() / np.sqrt(20000)
    bad = NoiseSDE(model.system, model.params, model.y0, 1.0, model.batch)  # Δτ forgotten
    wrong = simulate.solve_sde(bad, t, paths=paths, seed=5, dt=model.dt)["err2"].values
    z = (wrong.mean(0) - toy.second_moment_sgd(cfg))[1:] / (wrong.std(0, ddof=1)[1:] / np.sqrt(paths))
    assert np.abs(z).max() > 10


# -- engines and diagnostics -----------------------------------------------------------------------
@pytest.mark.parametrize("make", ["tiny", "toy"])
def test_numba_step_equals_the_jax_step(make):
    import jax.numpy as jnp

    if make == "tiny":
        model, _ = tiny_sde(TinyConfig(lr=0.4, batch=3))
        ys = [np.array([v]) for v in (-1.0, 0.2, 1.5)]
    else:
        model, _ = noise_sde(toy.problem(toy.LinRegConfig(lr=0.3, batch=3)))
        ys = [np.array(v) for v in ([0.0, 0.0], [2.0, -1.0], [1.0, -0.5])]
    inc, params = model.numba_increment()
    rng = np.random.default_rng(0)
    h = 0.05
    for y in ys:
        dW = rng.standard_normal(model.noise_dim) * np.sqrt(h)
        dy = np.empty(model.dim)
        inc(0.0, y, h, dW, np.uint64(0), params, dy)
        a = model.args()
        want = np.asarray(model.drift(0.0, jnp.asarray(y), a)) * h + np.asarray(model.diffusion(0.0, jnp.asarray(y), a, None)) @ dW
        np.testing.assert_allclose(dy, want, rtol=1e-12, atol=1e-14)


def test_psd_floor_diagnostic():
    cfg = toy.LinRegConfig()
    model, _ = noise_sde(toy.problem(cfg))
    rng = np.random.default_rng(1)
    assert min(model.psd_defect(rng.uniform(-3, 3, 2)) for _ in range(20)) > -1e-12
    S = toy.system()
    n = S.noise
    indefinite = Noise(n.per_sample_loss, n.state, n.samples, n.distribution, n.preconditioner, n.gradient, n.mean,
                       sp.Matrix([[1, 2], [2, 1]]), n.exact, n.method)
    bad_sys = ReducedSystem(name="bad", paper="toy", state=S.state, parameters=S.parameters, rhs=S.rhs, noise=indefinite)
    bad = NoiseSDE(bad_sys, cfg.params, cfg.y0, 0.1, 1)
    assert bad.psd_defect([0.0, 0.0]) == pytest.approx(-1 / 3)
    # the floors hide it: ldl drops the negative pivot 1 - 2^2, eigh the eigenvalue -1
    np.testing.assert_allclose(bad.per_sample_covariance([0.0, 0.0]), [[1, 2], [2, 4]], atol=1e-12)
    eigh = NoiseSDE(bad_sys, cfg.params, cfg.y0, 0.1, 1, factor="eigh")
    np.testing.assert_allclose(eigh.per_sample_covariance([0.0, 0.0]), [[1.5, 1.5], [1.5, 1.5]], atol=1e-12)
    # a rank-deficient PSD covariance is realised exactly by ldl (no jitter)
    rank1 = Noise(n.per_sample_loss, n.state, n.samples, n.distribution, n.preconditioner, n.gradient, n.mean,
                  sp.Matrix([[4, 2], [2, 1]]), n.exact, n.method)
    r1 = ReducedSystem(name="r1", paper="toy", state=S.state, parameters=S.parameters, rhs=S.rhs, noise=rank1)
    np.testing.assert_allclose(NoiseSDE(r1, cfg.params, cfg.y0, 0.1, 1).per_sample_covariance([0.0, 0.0]),
                               [[4, 2], [2, 1]], atol=1e-12)


def test_bad_inputs():
    cfg = toy.LinRegConfig()
    prob = toy.problem(cfg)
    with pytest.raises(ConfigError, match="config"):
        noise_sde(Problem(prob.system, prob.params, prob.y0, prob.t))
    with pytest.raises(ConfigError, match="Finite"):
        noise_sde(prob, factor="outcomes")
    with pytest.raises(ConfigError, match="MonteCarlo"):
        noise_sde(prob, factor="samples")
    with pytest.raises(ConfigError, match="factor"):
        noise_sde(prob, factor="sqrtm")
    S = systems()[0]
    bare = ReducedSystem(name=S.name, paper=S.paper, state=S.state, parameters=S.parameters, rhs=S.rhs)
    with pytest.raises(ConfigError, match="no noise"):
        noise_sde(Problem(bare, {"p": 0.8, "lr": 0.5}, {"a": 0.0}, np.arange(3.0), config=TinyConfig()))


def test_cli_simulate_sde_writes_path_time_on_ode_times(tmp_path):
    from figures.cli import main
    from figures.papers import PAPERS, Paper, register

    register(Paper(**ROW))
    try:
        out = tmp_path / "f.nc"
        res = CliRunner().invoke(main, ["simulate", "tiny", "--sde", "--paths", "64", "--out", str(out),
                                        "--set", "steps=40", "--set", "lr=0.2"])
        assert res.exit_code == 0, res.output
        ens = simulate.load(out)
        assert ens["prob"].dims == ("path", "time") and ens.sizes["path"] == 64
        np.testing.assert_array_equal(ens["time"].values, TinyConfig(steps=40, lr=0.2).ode_times())
        assert json.loads(json.dumps(float(ens.attrs["dt"]))) == 1.0
    finally:
        PAPERS.pop("tiny")
