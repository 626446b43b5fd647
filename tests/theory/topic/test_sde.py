"""The topic paper's minibatch noise and SDE (theory/topic/derive.py: one document's loss and the
full-space system; theory/topic/sde.py: the numeric model). Checks: the per-document loss averages
to the stage-1 loss; E[g] is the derived flow (check_drift) and, on the symmetric subspace, the
reduced stage-1 flow; the model's numeric per-sample flow, drift and covariance F Fᵀ equal the
sympy ones on a small instance (and the covariance lives in the context span); the engine's
increments have covariance Δτ Σ h; Σ equals the covariance of the real network's per-document
gradients (within Monte-Carlo error); `tdyn simulate topic --sde` writes (path, time) on
config.ode_times()."""

import itertools

import numpy as np
import pytest
import sympy as sp
import torch
from click.testing import CliRunner

from simulate._em import em_paths
from theory.core import enable_x64
from theory.noise import check_drift, expectation, step_time
from theory.topic import (A, B, C, TopicConfig, b_M, b_w, context_residual, document_distribution, document_loss,
                          document_table,
                          full_space_system, full_value_matrix, m, off_symmetric_residual, r, s, stage1_flow,
                          stage1_optimum, word_topics)
from theory.topic.derive import STAGE1_PARAMETERS, _full_population_loss
from theory.topic.sde import OBSERVABLES, TopicSDE, basis, check_config, labels_per_document, per_sample_flow, sde

enable_x64()  # jax arrays below are float64, as in simulate.solve_sde

SMALL = TopicConfig(T=2, v=2, tau=1, N=200, batch=4, lr=0.3, steps=40, log_every=10)
PARAMS = {"p_m": 0.15, "p_c": 0.1, "p_r": 0.1, "lam": 0.0, "eta": 0.3, "n_sel": 30.0}


@pytest.fixture(scope="module")
def small():
    return full_space_system(SMALL)


def _pvec(system, **over):
    return system.parameter_vector({**PARAMS, **over})


def _full_state(model, y):
    """The full (W, b) state vector (W row-major, then b) of the model's coordinates ``y``."""
    W, b = model.full_matrices(np.asarray(y))
    return np.concatenate([W.ravel(), b])


def _coordinate_map(model):
    """(D^2 + D, D r): the linear map from the model's coordinates to the full state."""
    return np.stack([_full_state(model, e) for e in np.eye(model.dim)], axis=1)


def test_document_loss_averages_to_the_stage1_population_loss(small):
    diff = expectation(document_loss(SMALL), document_distribution(SMALL)) - _full_population_loss(SMALL)
    f = sp.lambdify((small.state, small.parameters), diff, "numpy")
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert abs(f(rng.normal(size=len(small.state)), _pvec(small, lam=0.3))) < 1e-12


def test_noise_is_exact_and_its_mean_is_the_derived_flow(small):
    assert small.noise.exact and small.noise.method == "moments"
    chk = check_drift(small, ranges={"n_sel": (5, 50)})
    assert chk.passed and chk.max_rel_error < 1e-12


def test_full_flow_on_the_symmetric_subspace_is_the_stage1_flow(small):
    """The full-matrix flow at a symmetric (W, b) stays symmetric and its class means are the
    reduced flow theta_k' = -eta n_k^{-1} dL/dtheta_k (docs/papers/topic.md §3.5) — two separate derivations."""
    rng = np.random.default_rng(1)
    f_full = small.to_numpy()
    reduced = stage1_flow("theory")
    coords = (A, B, C, m, r, s, b_w, b_M)
    for _ in range(3):
        val = dict(zip(map(str, coords), rng.normal(size=8)))
        lam = 0.2
        W, b = full_value_matrix(val, SMALL.T, SMALL.v)
        dy = np.asarray(f_full(0.0, np.concatenate([W.ravel(), b]), _pvec(small, lam=lam)))
        D = W.shape[0]
        dW, db = dy[: D * D].reshape(D, D), dy[D * D:]
        subs = {**{x: val[str(x)] for x in coords},
                **dict(zip(STAGE1_PARAMETERS, [SMALL.T, SMALL.v, SMALL.tau, 0.15, 0.1, 0.1, lam, 0.3]))}
        want = {str(x): float(reduced[x].subs(subs)) for x in coords}
        dW_sym, db_sym = full_value_matrix(want, SMALL.T, SMALL.v)
        np.testing.assert_allclose(dW, dW_sym, atol=1e-12)
        np.testing.assert_allclose(db, db_sym, atol=1e-12)


def test_numeric_per_sample_flow_equals_the_symbolic_one(small):
    g = sp.lambdify((small.state, small.parameters, small.noise.samples), list(small.noise.gradient), "numpy")
    rng = np.random.default_rng(2)
    D = SMALL.n_words + 1
    for _ in range(3):
        W, b = rng.normal(size=(D, D)), rng.normal(size=D)
        xbar, q = rng.random(D), rng.dirichlet(np.ones(D - 1))
        want = np.asarray(g(np.concatenate([W.ravel(), b]), _pvec(small, lam=0.2), np.concatenate([xbar, q])), float)
        gW, gb = per_sample_flow(W, b, xbar, np.append(q, 0.0), 0.3, 0.2)
        np.testing.assert_allclose(np.concatenate([gW.ravel(), gb]), want, atol=1e-12)


@pytest.mark.parametrize("lam", [0.0, 0.2])
def test_model_drift_and_covariance_equal_the_symbolic_ones(small, lam):
    """Drift and F Fᵀ of the numeric model, mapped to the full (W, b) space, equal the sympy mean
    and covariance of the per-sample flow at random states (covariance: 60 random entries; printing
    all 465 takes half a minute)."""
    import jax.numpy as jnp

    cfg = SMALL.replace(lam=lam)
    model = TopicSDE(cfg)
    M = _coordinate_map(model)
    p = _pvec(small, lam=lam, n_sel=labels_per_document(cfg))
    rng = np.random.default_rng(3)
    n = len(small.state)
    pairs = [(i, j) for i, j in itertools.combinations_with_replacement(range(n), 2)]
    pairs = [pairs[k] for k in rng.choice(len(pairs), 60, replace=False)]
    mean = sp.lambdify((small.state, small.parameters), list(small.noise.mean), "numpy")
    cov = sp.lambdify((small.state, small.parameters), [small.noise.covariance[i, j] for i, j in pairs], "numpy")
    args = model.args()
    for _ in range(2):
        y = rng.normal(size=model.dim)
        theta = M @ y
        np.testing.assert_allclose(M @ np.asarray(model.drift(0.0, jnp.asarray(y), args)),
                                   np.asarray(mean(theta, p), float), atol=1e-12)
        F = M @ np.asarray(model.diffusion(0.0, jnp.asarray(y), args, None)) / float(args["scale"])
        C = F @ F.T
        np.testing.assert_allclose([C[i, j] for i, j in pairs], np.asarray(cov(theta, p), float), atol=1e-12)


def test_every_per_sample_flow_lies_in_the_context_span(small):
    """On the support of the document law (x_bar = x_bar_S, any labels), the symbolic per-sample
    flow of [W | b] has its right factor in the span of the contexts: the covariance has no mass
    outside it, so the model's coordinates are exact, not a reduction."""
    g = sp.lambdify((small.state, small.parameters, small.noise.samples), list(small.noise.gradient), "numpy")
    _, X, _ = document_table(SMALL)
    Bm = basis(SMALL)
    D = SMALL.n_words + 1
    rng = np.random.default_rng(7)
    for xbar in X:
        theta = rng.normal(size=len(small.state))
        q = rng.dirichlet(np.ones(D - 1))
        G = np.asarray(g(theta, _pvec(small, lam=0.2), np.concatenate([xbar, q])), float)
        Gt = np.concatenate([G[: D * D].reshape(D, D), G[D * D:, None]], axis=1)
        Wt = np.concatenate([theta[: D * D].reshape(D, D), theta[D * D:, None]], axis=1)
        Gt += 2 * 0.3 * 0.2 * np.concatenate([Wt[:, :D], np.zeros((D, 1))], axis=1)  # weight decay: -2 eta lam W
        np.testing.assert_allclose(Gt - Gt @ Bm @ Bm.T, 0.0, atol=1e-12)


@pytest.mark.parametrize("sizes", [dict(T=3, v=2, tau=2), dict(T=5, v=3, tau=3), dict(T=10, v=10, tau=2)])
def test_structured_increment_equals_drift_and_dense_diffusion(sizes):
    import jax.numpy as jnp

    model = TopicSDE(TopicConfig(**sizes, lam=0.1))
    args = model.args()
    rng = np.random.default_rng(4)
    y, dW = jnp.asarray(rng.normal(size=model.dim)), jnp.asarray(rng.normal(size=model.noise_dim))
    h = 0.7
    want = model.drift(0.0, y, args) * h + model.diffusion(0.0, y, args, None) @ dW
    np.testing.assert_allclose(np.asarray(model.increment(0.0, y, h, dW, None, args)), np.asarray(want), atol=1e-12)


@pytest.mark.parametrize("sizes", [dict(T=3, v=2, tau=2), dict(T=5, v=3, tau=3), dict(T=10, v=10, tau=2)])
def test_numba_step_equals_the_jax_increment(sizes):
    import jax.numpy as jnp

    model = TopicSDE(TopicConfig(**sizes, lam=0.1))
    step, params = model.numba_increment()
    rng = np.random.default_rng(5)
    y, dW = rng.normal(size=model.dim), rng.normal(size=model.noise_dim)
    dy = np.full(model.dim, np.nan)
    step(0.0, y, 0.7, dW, np.uint64(0), params, dy)
    want = model.increment(0.0, jnp.asarray(y), 0.7, jnp.asarray(dW), None, model.args())
    np.testing.assert_allclose(dy, np.asarray(want), rtol=1e-12, atol=1e-13)


def test_sde_increments_have_covariance_sigma_dt():
    """One Euler–Maruyama step of the engine from a fixed state: the increments' covariance is
    Δτ Σ h, Σ = F Fᵀ/B (F checked against the symbolic covariance above), and their mean is f h,
    within Monte-Carlo error."""
    import jax.numpy as jnp

    model, _ = sde(SMALL)
    rng = np.random.default_rng(5)
    y0, h, n = rng.normal(size=model.dim) * 0.3, 0.5, 40000
    Y = em_paths(model, np.array([0.0, h]), h, 1, n, y0)  # the engine of simulate.solve_sde
    inc = Y[:, 1] - Y[:, 0]
    args = model.args()
    F = np.asarray(model.diffusion(0.0, jnp.asarray(y0), args, None)) / float(args["scale"])
    C = F @ F.T * step_time(SMALL) / SMALL.batch * h
    E = inc - inc.mean(0)
    P = E[:, :, None] * E[:, None, :]
    se = P.std(0, ddof=1) / np.sqrt(n)
    ok = se > 0
    assert np.all(np.abs(C[~ok]) < 1e-14)
    assert (np.abs(P.mean(0) * n / (n - 1) - C)[ok] / se[ok]).max() < 5.0
    f = np.asarray(model.drift(0.0, jnp.asarray(y0), args)) * h
    assert np.all(np.abs(inc.mean(0) - f) <= 5 * inc.std(0) / np.sqrt(n) + 1e-14)


def test_covariance_equals_the_real_networks_per_document_gradients():
    """Σ of the model against the covariance of per-document gradients of the real network
    (empirical.topic: sampled documents, BERT masking, the stage-1 transformer, autograd), at
    W = 0 (topic-set noise dominates) and at the stage-1 optimum (label noise only), on the
    context span (what a finite document adds outside it is the finite-N part, module docs).
    Long documents (N = 1000) keep the finite-N terms (~2 %) below the Monte-Carlo error."""
    from empirical.topic.data import DocumentSampler, mask_batch, vocabulary
    from empirical.topic.model import TopicTransformer, loss_on_selected

    cfg = TopicConfig.preset("stage1", True).replace(N=1000, lr=0.5)
    model = TopicSDE(cfg)
    voc = vocabulary(cfg)
    net = TopicTransformer(cfg, voc, torch.Generator().manual_seed(0))
    Bm = basis(cfg)
    docs = 400
    samp = DocumentSampler(cfg, voc, 11)
    rng = np.random.default_rng(12)
    tok, val = samp.sample(docs)
    masked, sel = mask_batch(tok, val, cfg, voc, rng)
    opt = stage1_optimum(cfg)
    for W0, b0 in ((np.zeros((voc.size, voc.size)), np.zeros(voc.size)), full_value_matrix(opt, cfg.T, cfg.v)):
        with torch.no_grad():
            net.W_V.copy_(torch.as_tensor(W0))
            net.b.copy_(torch.as_tensor(b0))
        G = []
        for d in range(docs):
            net.zero_grad()
            loss = loss_on_selected(net(torch.as_tensor(masked[d:d + 1]), torch.as_tensor(val[d:d + 1])),
                                    torch.as_tensor(tok[d:d + 1]), torch.as_tensor(sel[d:d + 1]), "squared")
            loss.backward()
            Gt = -cfg.lr * np.concatenate([net.W_V.grad.numpy(), net.b.grad.numpy()[:, None]], axis=1)
            G.append((Gt @ Bm).ravel())  # the per-document flow in the model's coordinates
        G = np.asarray(G)
        y = (np.concatenate([W0, b0[:, None]], axis=1) @ Bm).ravel()
        F = np.asarray(model.diffusion(0.0, y, model.args(), None)) / float(model.args()["scale"])
        Sigma = F @ F.T
        # the largest directions of Σ and its trace, each against the sample covariance
        lam, vec = np.linalg.eigh(Sigma)
        for k in (-1, -2, -3):
            u = G @ vec[:, k]
            se = np.sqrt(2 / (docs - 1)) * u.var(ddof=1)
            assert abs(u.var(ddof=1) - lam[k]) < 4 * se + 0.05 * lam[k], (k, u.var(ddof=1), lam[k])
        tr_emp = ((G - G.mean(0)) ** 2).sum(1)
        assert abs(tr_emp.mean() * docs / (docs - 1) - np.trace(Sigma)) < 4 * tr_emp.std() / np.sqrt(docs) \
            + 0.05 * np.trace(Sigma)


@pytest.mark.parametrize("sizes", [dict(T=3, v=2, tau=2), dict(T=5, v=3, tau=3), dict(T=10, v=10, tau=2)])
def test_the_observables_read_from_y_equal_their_definitions_on_the_full_matrices(sizes):
    model = TopicSDE(TopicConfig(**sizes))
    rng = np.random.default_rng(7)
    Y = rng.normal(size=(2, 3, model.dim))
    Y[1, 2] = np.repeat(rng.normal(size=(model.D, 1)), model.r, axis=1).ravel()  # each row constant
    got, want = model.observables(Y), model.full_observables(Y)
    assert set(got) == set(want) == set(OBSERVABLES)
    for k in OBSERVABLES:
        assert got[k].shape == (2, 3), k
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-13, err_msg=k)


def test_the_observables_agree_with_the_full_matrices():
    model = TopicSDE(SMALL)
    rng = np.random.default_rng(6)
    Y = rng.normal(size=(3, model.dim))
    obs = model.observables(Y)
    W, b = model.full_matrices(Y)
    top = np.concatenate([word_topics(SMALL.T, SMALL.v), [-1]])
    for i in range(3):
        assert obs["off_symmetric_residual"][i] == pytest.approx(float(off_symmetric_residual(W[i], top)), abs=1e-13)
        assert obs["context_residual"][i] == pytest.approx(float(context_residual(W[i], b[i], top, SMALL.n_words)),
                                                           abs=1e-13)


def test_unsupported_settings_are_refused():
    from theory import ConfigError

    base = TopicConfig.preset("stage1", True)
    for over in ({"data": "lda"}, {"optimizer": "adam"}, {"init_scale": 0.1}, {"loss": "ce"}, {"n_docs": 10},
                 {"vocab": "code"}):
        with pytest.raises(ConfigError):
            check_config(base.replace(**over))


def test_cli_simulate_sde_writes_path_and_time(tmp_path):
    import xarray as xr

    from figures.cli import main

    out = tmp_path / "f.nc"
    res = CliRunner().invoke(main, ["simulate", "topic", "--sde", "--paths", "16", "--set", "T=3", "--set", "v=2",
                                    "--set", "steps=60", "--set", "log_every=20", "--out", str(out)])
    assert res.exit_code == 0, res.output
    ds = xr.load_dataset(out)
    assert ds["off_symmetric_residual"].dims == ("path", "time")
    cfg = TopicConfig(T=3, v=2, steps=60, log_every=20)
    np.testing.assert_array_equal(ds["time"].values, cfg.ode_times())
    assert ds.sizes["path"] == 16
