"""Theory checks for papers/topic.md: the derived stage-1 flow against full-matrix numpy gradient
descent, the headline 1/(v(1-(1-p_c)p_m)), the closed forms of spec §3.5, the stage-2 optimum
(spec §3.6 table; code variant 1 + T p_c/p_r) and the escape rate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp

from theory import topic as tp

SMALL = dict(T=4, v=3, tau=2, p_m=0.3, p_c=0.2, p_r=0.25)


# ------------------------------------------------------------------------------------------------
# Independent numpy model of the stage-1 population problem (full matrices, all documents)
# ------------------------------------------------------------------------------------------------
def context_numpy(T, v, S, p_m, p_c, p_r, keys):
    """Expected key histogram of a long masked document with topic set S, written from the
    masking law position by position (spec §1.2), not from theory.topic."""
    n = T * v
    x = np.zeros(n + 1)
    doc_words = [w for w in range(n) if w // v in S]
    for w in doc_words:  # a position holding word w (prob 1/len(doc_words))
        pw = 1.0 / len(doc_words)
        if keys == "theory":
            x[w] += pw * (1 - p_m)  # unselected
            x[w] += pw * p_m * p_c  # selected, kept
            x[:n] += pw * p_m * p_r / n  # selected, random word
            x[n] += pw * p_m * (1 - p_c - p_r)  # selected, MASK
        else:  # selected positions are not keys: renormalise over unselected positions
            x[w] += pw
    return x


def population(T, v, tau, p_m, p_c, p_r, keys):
    docs = list(itertools.combinations(range(T), tau))
    X = np.array([context_numpy(T, v, S, p_m, p_c, p_r, keys) for S in docs])
    Y = []  # list of per-doc label sets
    for S in docs:
        Y.append([w for w in range(T * v) if w // v in S])
    return X, Y


def full_loss_grad(W, b, X, Y, lam):
    """E_S E_y ||W x_S + b - e_y||^2 + lam ||W||^2 and its gradient, y uniform on S's words."""
    L, gW, gb = 0.0, np.zeros_like(W), np.zeros_like(b)
    for x, ys in zip(X, Y):
        o = W @ x + b
        for y in ys:
            e = o.copy()
            e[y] -= 1.0
            L += e @ e / len(ys)
            gW += 2 * np.outer(e, x) / len(ys)
            gb += 2 * e / len(ys)
    n = len(X)
    return L / n + lam * (W**2).sum(), gW / n + 2 * lam * W, gb / n


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_symbolic_flow_equals_full_matrix_gradient_descent(keys):
    """Acceptance 1: the reduced flow (Euler step = one GD step) tracks full-matrix GD to 1e-10,
    and the loss in symmetric coordinates equals the full-matrix population loss."""
    cfg = tp.TopicConfig(**SMALL, lam=0.01, keys=keys)
    X, Y = population(cfg.T, cfg.v, cfg.tau, cfg.p_m, cfg.p_c, cfg.p_r, keys)
    rng = np.random.default_rng(0)
    coords = dict(zip(["A", "B", "C", "m", "r", "s", "b_w", "b_M"], rng.normal(0, 0.3, 8)))
    W, b = tp.full_value_matrix(coords, cfg.T, cfg.v)
    sysm = tp.stage1_system(keys)
    f = sysm.to_numpy()
    lr = 0.05
    p = sysm.parameter_vector({**tp.system_parameters(cfg), "eta": lr})
    y = np.array([coords[n] for n in sysm.state_names])
    loss_sym = sp.lambdify(sysm.state + sysm.parameters, sysm.expand_definitions(sysm.observables["population_loss"]))
    topics = np.repeat(np.arange(cfg.T), cfg.v)
    for step in range(60):
        L, gW, gb = full_loss_grad(W, b, X, Y, cfg.lam)
        assert loss_sym(*y, *p) == pytest.approx(L, abs=1e-12)
        W, b = W - lr * gW, b - lr * gb
        y = y + f(0.0, y, p)
    red = tp.reduced_coordinates(W, b, topics, mask_id=cfg.T * cfg.v)
    for i, n in enumerate(sysm.state_names):
        assert abs(red[n] - y[i]) < 1e-10, n
    # the subspace is invariant: W is still exactly symmetric
    Wsym, bsym = tp.full_value_matrix({n: y[i] for i, n in enumerate(sysm.state_names)}, cfg.T, cfg.v)
    assert np.abs(W - Wsym).max() < 1e-10 and np.abs(b - bsym).max() < 1e-10


def test_context_frequencies_match_masking_law():
    cfg = tp.TopicConfig(**SMALL)
    for keys in tp.KEY_VARIANTS:
        fr = tp.context_frequencies(keys)
        subs = {tp.T: cfg.T, tp.v: cfg.v, tp.tau: cfg.tau, tp.p_m: cfg.p_m, tp.p_c: cfg.p_c, tp.p_r: cfg.p_r}
        x = context_numpy(cfg.T, cfg.v, (0, 1), cfg.p_m, cfg.p_c, cfg.p_r, keys)
        assert float(fr["f_in"].subs(subs)) == pytest.approx(x[0], abs=1e-14)
        assert float(fr["f_out"].subs(subs)) == pytest.approx(x[-2], abs=1e-14)
        assert float(fr["f_mask"].subs(subs)) == pytest.approx(x[-1], abs=1e-14)
        assert x.sum() == pytest.approx(1.0, abs=1e-14)


def test_headline_comes_out_of_the_derivation():
    """Slides: average same-topic minus different-topic = 1/(v(1-(1-p_c)p_m)); code variant 1/v."""
    v, p_m, p_c = tp.v, tp.p_m, tp.p_c
    spec = 1 / (v * (1 - (1 - p_c) * p_m))
    assert sp.simplify(tp.headline_block_difference("theory") - spec) == 0
    assert sp.simplify(tp.headline_block_difference("code") - 1 / v) == 0
    # defaults: 0.115607
    val = tp.headline_block_difference("theory").subs({v: 10, p_m: sp.Rational(15, 100), p_c: sp.Rational(1, 10)})
    assert float(val) == pytest.approx(0.115607, abs=1e-6)


def test_finite_weight_decay_optimum_and_kappa_match_spec():
    """Spec §3.5/P4: omega_2*/v = a(T-tau)/(v[(T-tau)a^2 + lam v tau T (T-1)]); kappa of the tau-model."""
    T, v, tau, lam, p_m, p_c = tp.T, tp.v, tp.tau, tp.lam, tp.p_m, tp.p_c
    a = 1 - (1 - p_c) * p_m
    spec = a * (T - tau) / (v * ((T - tau) * a**2 + lam * v * tau * T * (T - 1)))
    assert sp.simplify(tp.headline_block_difference("theory", limit=False) - spec) == 0
    eq = tp.topic_mode_equation("theory")
    assert sp.simplify(eq["kappa"] - (T - tau) / (tau * T * (T - 1) * v)) == 0
    assert sp.simplify(eq["a"] - a) == 0
    # rate 2 eta (kappa a^2 + lam); closed form solves the ODE from 0
    kap = eq["kappa"]
    assert sp.simplify(eq["rate"] - 2 * tp.eta * (kap * a**2 + lam)) == 0
    sol = tp.topic_mode_solution("theory")["omega_2"]
    assert sp.simplify(sp.diff(sol, tp.t_sym) - eq["rhs"].subs(tp.omega_2, sol)) == 0
    assert sol.subs(tp.t_sym, 0) == 0
    spec_sol = kap * a / (kap * a**2 + lam) * (1 - sp.exp(-2 * tp.eta * (kap * a**2 + lam) * tp.t_sym))
    num = {T: 10, v: 10, tau: 2, p_m: 0.15, p_c: 0.1, tp.p_r: 0.1, lam: 0.003, tp.eta: 0.3, tp.t_sym: 77.0}
    assert float(sol.subs(num)) == pytest.approx(float(spec_sol.subs(num)), rel=1e-12)
    # T = v = 10, tau = 2: 2 kappa a^2 = 0.00665
    assert float((2 * kap * a**2).subs(num)) == pytest.approx(0.00665, abs=5e-6)


def test_optimum_block_statistic_is_one_over_va_numpy_ridge():
    """Acceptance 1: the lam -> 0 optimum's block statistic equals 1/(v a), checked by an
    independent full-matrix ridge solve (numpy lstsq) over all documents."""
    cfg = tp.TopicConfig(**SMALL)
    for keys, a in (("theory", 1 - (1 - cfg.p_c) * cfg.p_m), ("code", 1.0)):
        X, Y = population(cfg.T, cfg.v, cfg.tau, cfg.p_m, cfg.p_c, cfg.p_r, keys)
        n = cfg.T * cfg.v
        # targets: E[e_y|S] = u_S (the variance term does not depend on W, b)
        U = np.zeros((len(X), n + 1))
        for i, ys in enumerate(Y):
            U[i, ys] = 1 / len(ys)
        lam = 1e-9
        Xa = np.hstack([X, np.ones((len(X), 1))])
        reg = np.diag([lam * len(X)] * (n + 1) + [0.0])
        Wb = np.linalg.solve(Xa.T @ Xa + reg, Xa.T @ U).T
        W = Wb[:, :-1]
        red = tp.reduced_coordinates(W, Wb[:, -1], np.repeat(np.arange(cfg.T), cfg.v), mask_id=n)
        assert red["block_difference"] == pytest.approx(1 / (cfg.v * a), rel=1e-6)
        opt = tp.stage1_optimum(cfg.replace(keys=keys))
        assert (opt["A"] + (cfg.v - 1) * opt["B"]) / cfg.v - opt["C"] == pytest.approx(1 / (cfg.v * a), rel=1e-12)
        assert opt["A"] == pytest.approx(red["A"], abs=1e-6) and opt["C"] == pytest.approx(red["C"], abs=1e-6)


def test_embedding_mode_is_logistic_as_in_spec():
    e2, eta, a, kap = tp.e_2, tp.eta, 1 - (1 - tp.p_c) * tp.p_m, tp.topic_mode_equation()["kappa"]
    em = tp.embedding_topic_mode("theory")
    spec = -8 * eta * kap * a * e2 * (a * e2 - 1)
    assert sp.simplify((em["rhs"] - spec).subs(tp.lam, 0)) == 0
    assert sp.simplify(em["fixed_point"].subs(tp.lam, 0) - 1 / a) == 0


def test_ode_backends_agree_with_closed_form():
    """The Problem's solve_options on both backends, and the closed form through
    ``closed_forms_numpy`` (what the figures use), on the Trainer's grid ``config.ode_times()``."""
    import simulate as sim

    cfg = tp.TopicConfig(T=5, v=4, tau=2, lr=0.3, steps=410, log_every=20, lam=0.001)
    prob = tp.problem(cfg)
    np.testing.assert_array_equal(prob.t, np.append(np.arange(0, 410, 20), 410).astype(float))
    d = sim.solve(prob, backend="diffrax")
    s = sim.solve(prob, backend="scipy")
    assert np.max(np.abs(d["topic_mode"].values - s["topic_mode"].values)) < 5e-8
    sol = sp.lambdify((tp.t_sym, *tp.STAGE1_PARAMETERS), tp.topic_mode_solution("theory")["omega_2"])
    p = prob.system.parameter_vector(prob.params)
    closed = sol(prob.t, *p)
    assert np.max(np.abs(d["topic_mode"].values - closed)) < 5e-8
    np.testing.assert_allclose(prob.system.closed_forms_numpy()(prob.t, p)["topic_mode"], closed, rtol=1e-12)
    assert d["within_topic_mode"].values[-1] == pytest.approx(0.0, abs=1e-12)  # no gradient as N -> inf


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_stage1_flow_through_definitions_is_the_gradient_of_the_expanded_loss(keys):
    """The exported rhs (written with a, f_in, ..., o_M) expands to -eta n_k^{-1} dL/dtheta_k of the
    loss in state and parameters only (sympy, exact), and the named a is 1-(1-p_c)p_m."""
    sysm = tp.stage1_system(keys)
    L = tp.stage1_loss(keys)
    n = tp.multiplicities()
    for x, f in zip(sysm.state, sysm.expanded_rhs):
        assert sp.cancel(f - (-tp.eta * sp.diff(L, x) / n[x])) == 0, x
    if keys == "theory":
        defs = dict((str(q), e) for q, e in sysm.definitions)
        assert sp.simplify(defs["a"] - (1 - (1 - tp.p_c) * tp.p_m)) == 0


# ------------------------------------------------------------------------------------------------
# Stage 2
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("T,v,tau,p_c,p_r", [(10, 10, 2, 0.1, 0.1), (6, 3, 3, 0.2, 0.3)])
def test_stage2_gamma_code_variant_closed_form(T, v, tau, p_c, p_r):
    """Acceptance 1: code masking variant gamma* = 1 + T p_c / p_r."""
    cfg = tp.TopicConfig(T=T, v=v, tau=tau, p_c=p_c, p_r=p_r, keys="code")
    opt = tp.stage2_optimum(cfg)
    assert opt["gamma"] == pytest.approx(1 + T * p_c / p_r, rel=1e-6)
    assert opt["loss"] < opt["loss_uniform"]


def test_stage2_theory_variant_matches_spec_table():
    opt = tp.stage2_optimum(tp.TopicConfig(T=10, v=10, tau=2))
    assert opt["loss_uniform"] == pytest.approx(0.95, abs=1e-12)
    assert opt["loss"] == pytest.approx(0.945894, abs=2e-6)
    assert opt["gamma"] == pytest.approx(6.637, abs=2e-3)
    assert opt["alpha"] == pytest.approx(7.264, abs=2e-3)
    assert opt["beta"] == pytest.approx(1.0, abs=1e-4)


def _spec_stage2_loss(sc, W, T, v, tau, pm, pc, pr):
    """papers/topic.md Appendix `stage2_loss` (typed from the spec; an independent check)."""
    def outputs(W, cls, hM):
        Ht = {}
        for c, h, t, _ in cls:
            Ht[t] = Ht.get(t, 0.) + c * h
        Hw = sum(Ht.values())
        outs = [(c, W['A'] * h + W['B'] * (Ht[t] - h) + W['C'] * (Hw - Ht[t]) + W['m'] * hM + W['bw'], y) for c, h, t, y in cls]
        return outs, W['r'] * Hw + W['s'] * hM + W['bM']

    def sq(outs, oM):
        return sum(c * (o - y) ** 2 for c, o, y in outs) + oM**2
    s1, s2, s3, sMw, swM, sMM = sc
    e = np.exp
    a = 1 - pm + pm * pc; rho = pm * pr / (T * v); m0 = pm * (1 - pc - pr); fin = a / (tau * v) + rho; fo = rho; ti = 1 / (tau * v)
    Z = tau * v * fin * e(swM) + (T - tau) * v * fo * e(swM) + m0 * e(sMM)
    cls = [(v, fin * e(swM) / Z, ('S', k), ti) for k in range(tau)] + [(v, fo * e(swM) / Z, ('O', k), 0.) for k in range(T - tau)]
    LM = sq(*outputs(W, cls, m0 * e(sMM) / Z)) + 1 - ti
    Z = fin * e(s1) + (v - 1) * fin * e(s2) + (tau - 1) * v * fin * e(s3) + (T - tau) * v * fo * e(s3) + m0 * e(sMw)
    base = [(v, fin * e(s3) / Z, ('S', k)) for k in range(tau - 1)] + [(v, fo * e(s3) / Z, ('O', k)) for k in range(T - tau)]
    cls = [(1, fin * e(s1) / Z, 'q', 1.), (v - 1, fin * e(s2) / Z, 'q', 0.)] + [(c, h, t, 0.) for c, h, t in base]
    Lc = sq(*outputs(W, cls, m0 * e(sMw) / Z))
    cls = [(1, fin * e(s1) / Z, 'q', ti), (v - 1, fin * e(s2) / Z, 'q', ti)] + [(c, h, t, (ti if t[0] == 'S' else 0.)) for c, h, t in base]
    Lri = sq(*outputs(W, cls, m0 * e(sMw) / Z)) + 1 - ti
    Z = fo * e(s1) + (v - 1) * fo * e(s2) + tau * v * fin * e(s3) + (T - tau - 1) * v * fo * e(s3) + m0 * e(sMw)
    cls = [(1, fo * e(s1) / Z, 'q', 0.), (v - 1, fo * e(s2) / Z, 'q', 0.)] + [(v, fin * e(s3) / Z, ('S', k), ti) for k in range(tau)] \
        + [(v, fo * e(s3) / Z, ('O', k), 0.) for k in range(T - tau - 1)]
    Lro = sq(*outputs(W, cls, m0 * e(sMw) / Z)) + 1 - ti
    return (1 - pc - pr) * LM + pc * Lc + pr * (tau / T * Lri + (1 - tau / T) * Lro)


def test_stage2_loss_matches_spec_appendix_at_random_logits():
    cfg = tp.TopicConfig(T=5, v=3, tau=2, p_m=0.2, p_c=0.15, p_r=0.2)
    rng = np.random.default_rng(1)
    coords = dict(A=0.3, B=0.2, C=-0.05, m=0.1, r=-0.2, s=0.05, b_w=0.02, b_M=0.01)
    W, b = tp.full_value_matrix(coords, cfg.T, cfg.v)
    Wspec = dict(coords, bw=coords["b_w"], bM=coords["b_M"])
    for _ in range(3):
        sc = rng.normal(0, 1, 6)
        mine = float(tp.stage2_loss(tp.tied_logits(cfg.T, cfg.v, *sc), W, b, cfg, documents="all"))
        spec = _spec_stage2_loss(sc, Wspec, cfg.T, cfg.v, cfg.tau, cfg.p_m, cfg.p_c, cfg.p_r)
        assert mine == pytest.approx(spec, rel=1e-12)


def test_escape_rate_code_variant_closed_form():
    """Spec §3.6: sigma_max(G) = |dL/dgamma|/((T-1)v), dL/dgamma = -2 p_c (tau-1)/(tau^2 v)."""
    cfg = tp.TopicConfig(T=6, v=4, tau=2, p_c=0.2, p_r=0.3, keys="code")
    sig = tp.escape_rate(cfg)["sigma_max"]
    dL = 2 * cfg.p_c * (cfg.tau - 1) / (cfg.tau**2 * cfg.v)
    assert sig == pytest.approx(dL / ((cfg.T - 1) * cfg.v), rel=1e-10)


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_stage2_tied_sympy_loss_equals_full_vocabulary_loss(keys):
    """The class-counted sympy stage-2 loss equals the full-vocabulary population loss (all
    documents) at random tied logits and a generic W^V; its s2-derivative at S = 0 is the sum of
    G = dL/dS over the same-topic/different-word entries (autodiff of the full loss)."""
    cfg = tp.TopicConfig(T=5, v=3, tau=2, p_m=0.2, p_c=0.15, p_r=0.2, keys=keys)
    loss = tp.stage2_tied_loss(keys)
    rng = np.random.default_rng(0)
    coords = dict(zip(["A", "B", "C", "m", "r", "s", "b_w", "b_M"], rng.normal(0, 0.3, 8)))
    W, b = tp.full_value_matrix(coords, cfg.T, cfg.v)
    syms = tp.STAGE2_STATE + tp.STAGE2_VALUE + (tp.T, tp.v, tp.tau, tp.p_m, tp.p_c, tp.p_r)
    vals = [coords[str(x)] for x in tp.STAGE2_VALUE] + [cfg.T, cfg.v, cfg.tau, cfg.p_m, cfg.p_c, cfg.p_r]
    L = sp.lambdify(syms, loss)
    for _ in range(2):
        sc = rng.normal(0, 1, 6)
        full = float(tp.stage2_loss(tp.tied_logits(cfg.T, cfg.v, *sc, xp=np), W, b, cfg, documents="all", xp=np))
        assert L(*sc, *vals) == pytest.approx(full, rel=1e-12)
    dL_ds2 = sp.lambdify(syms, sp.diff(loss, tp.s2))
    G = tp.escape_rate(cfg, W, b)["G"]
    top = np.repeat(np.arange(cfg.T), cfg.v)
    same_other = (top[:, None] == top[None, :]) & ~np.eye(cfg.T * cfg.v, dtype=bool)
    assert dL_ds2(*np.zeros(6), *vals) == pytest.approx(G[:-1, :-1][same_other].sum(), rel=1e-9)


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_stage2_flow_converges_to_gamma_star(keys):
    import simulate as sim

    cfg = tp.TopicConfig(T=5, v=3, tau=2, p_m=0.2, p_c=0.15, p_r=0.2, keys=keys, lr=1.0)
    sysm = tp.stage2_system(keys)
    sol = sim.solve(sysm, tp.stage2_parameters(cfg), np.zeros(2), np.linspace(0, 3e5, 20), backend="scipy",
                    method="DOP853")
    assert sol["gamma"].values[-1] == pytest.approx(tp.stage2_optimum(cfg)["gamma"], rel=1e-5)
    if keys == "code":
        assert sol["gamma"].values[-1] == pytest.approx(1 + cfg.T * cfg.p_c / cfg.p_r, rel=1e-6)
    assert np.all(np.diff(sol["stage2_loss"].values) <= 1e-15)  # gradient flow: loss never increases


@pytest.mark.parametrize("keys", ["theory", "code"])
def test_stage2_softmax_form_equals_direct_differentiation(keys):
    """The exported stage-2 rhs (key masses h, outputs o, u_k = h_k dL/dh_k, the softmax identity)
    equals -eta n^{-1} dL/ds of the expanded tied loss, differentiated directly, at random points."""
    sysm = tp.stage2_system(keys)
    loss = tp.stage2_tied_loss(keys).subs(tp.STAGE2_TYING).subs({tp.m: 0, tp.r: 0, tp.s: 0, tp.b_M: 0})
    n = tp.logit_multiplicities()
    direct = sp.lambdify((sysm.state, sysm.parameters), [-tp.eta * sp.diff(loss, x) / n[x] for x in (tp.s1, tp.s2)])
    loss_f = sp.lambdify((sysm.state, sysm.parameters), loss)
    f = sysm.to_numpy()
    obs = sysm.observables_numpy()
    rng = np.random.default_rng(3)
    for _ in range(4):
        y = rng.normal(0, 1, 2)
        p = np.array([5, 3, 2, 0.2, 0.15, 0.2, 0.7, *rng.normal(0, 0.3, 4)])
        np.testing.assert_allclose(f(0.0, y, p), direct(y, p), rtol=1e-10, atol=1e-15)
        assert obs(y[None, :], p)["stage2_loss"][0] == pytest.approx(loss_f(y, p), rel=1e-12)
