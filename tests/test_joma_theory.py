"""JoMA theory: the sympy derivation against the spec's printed equations (papers/joma.md §2),
exact invariants, Theorem 2's closed form, nonlinear anchors (§4 item 3), HBLT co-occurrence."""

import math

import numpy as np
import pytest
import sympy as sp
from scipy.special import erfinv

from theory import joma as J
from theory.errors import ConfigError


# ---- the spec's §2.1 listing, typed here (independent of the sympy derivation) -------------------
def spec_block_rhs(attention, activation, X, G, V, s, z, temperature=1.0):
    N = X.shape[0]
    E = X * np.exp(z / temperature)
    B = {"linear": X * z, "exp": E, "softmax": E / E.sum(1, keepdims=True)}[attention]
    pre = B @ V.T + s
    dphi = {"linear": np.ones_like(pre), "tanh": 1 - np.tanh(pre) ** 2, "relu": (pre > 0).astype(float)}[activation]
    C = G * dphi / N
    Vdot = C.T @ B
    sdot = C.sum(0)
    Uv = C @ V
    zdot = {"linear": (X * Uv).sum(0), "exp": (B * Uv).sum(0) / temperature,
            "softmax": ((B * Uv).sum(0) - (B * (B * Uv).sum(1, keepdims=True)).sum(0)) / temperature}[attention]
    return Vdot, sdot, zdot


def _random_point(rng, Mc, K, N):
    X = rng.dirichlet(np.ones(Mc), size=N)
    G = rng.standard_normal((N, K))
    V = rng.standard_normal((K, Mc)) * 0.7
    s = rng.standard_normal(K) * 0.3
    z = rng.standard_normal(Mc) * 0.5
    return X, G, V, s, z


def _pack(X, G, V, s, z, tau, Mc, K, N):
    y = np.concatenate([z, V.ravel(), s])
    params = {f"x_{n + 1}_{l + 1}": X[n, l] for n in range(N) for l in range(Mc)}
    params.update({f"g_{n + 1}_{k + 1}": G[n, k] for n in range(N) for k in range(K)})
    params["tau"] = tau
    params.update({f"bbar_{l + 1}": X.mean(0)[l] for l in range(Mc)})
    return y, params


@pytest.mark.parametrize("attention", J.ATTENTIONS)
@pytest.mark.parametrize("activation", J.ACTIVATIONS)
def test_block_flow_matches_spec_listing(attention, activation):
    Mc, K, N = 3, 2, 3
    rng = np.random.default_rng(1)
    X, G, V, s, z = _random_point(rng, Mc, K, N)
    tau = 0.7 if attention != "linear" else 1.0
    sysm = J.block_system(attention, activation, Mc, K, N)
    assert sysm.state_names == J.state_names(Mc, K)
    y, params = _pack(X, G, V, s, z, tau, Mc, K, N)
    got = sysm.to_numpy()(0.0, y, sysm.parameter_vector(params))
    Vdot, sdot, zdot = spec_block_rhs(attention, activation, X, G, V, s, z, tau)
    np.testing.assert_allclose(got, np.concatenate([zdot, Vdot.ravel(), sdot]), rtol=1e-12, atol=1e-13)


def test_block_flow_is_gradient_of_mean_objective_finite_differences():
    """The flow is +grad of (1/N) sum_n J_n: central differences of the numpy objective."""
    Mc, K, N = 3, 2, 2
    rng = np.random.default_rng(2)
    X, G, V, s, z = _random_point(rng, Mc, K, N)

    def obj(y):
        zz, VV, ss = y[:Mc], y[Mc:Mc + K * Mc].reshape(K, Mc), y[Mc + K * Mc:]
        B = X * np.exp(zz) / (X * np.exp(zz)).sum(1, keepdims=True)
        return (G * np.tanh(B @ VV.T + ss)).sum() / N

    sysm = J.block_system("softmax", "tanh", Mc, K, N)
    y, params = _pack(X, G, V, s, z, 1.0, Mc, K, N)
    got = sysm.to_numpy()(0.0, y, sysm.parameter_vector(params))
    h = 1e-6
    fd = np.array([(obj(y + h * e) - obj(y - h * e)) / (2 * h) for e in np.eye(y.size)])
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("attention", ["linear", "exp"])
@pytest.mark.parametrize("activation", ["linear", "tanh"])
def test_exact_invariants_symbolically(attention, activation):
    """Theorem 1: the Lie derivative of each invariant simplifies to 0 for the N-sample block."""
    sysm = J.block_system(attention, activation, 3, 2, 2)
    assert len(sysm.invariants) == 3
    for expr in sysm.invariants.values():
        assert sp.simplify(sysm.time_derivative(expr)) == 0


def test_invariants_have_the_spec_form():
    z1 = sp.Symbol("z_1", real=True)
    v11, v21 = sp.Symbol("v_1_1", real=True), sp.Symbol("v_2_1", real=True)
    assert sp.expand(J.invariant_expressions("linear", 3, 2)["invariant_1"] - (z1**2 - v11**2 - v21**2)) == 0
    assert sp.expand(J.invariant_expressions("exp", 3, 2)["invariant_1"].subs(J.tau, 1)
                     - (z1 - (v11**2 + v21**2) / 2)) == 0


def test_softmax_residual_vanishes_when_conditions_hold_and_not_otherwise():
    """Per sample (N = 1, bbar = b at the current point) conditions (i)-(ii) hold exactly and the
    residual is 0 (spec Appendix); with heterogeneous x and random g it is O(1)."""
    Mc, K = 3, 2
    rng = np.random.default_rng(3)
    for N, expect_zero in ((1, True), (3, False)):
        X, G, V, s, z = _random_point(rng, Mc, K, N)
        res = J.softmax_invariant_residual(Mc, K, N)
        sysm = J.block_system("softmax", "linear", Mc, K, N)
        y, params = _pack(X, G, V, s, z, 1.0, Mc, K, N)
        if expect_zero:
            b = X[0] * np.exp(z) / (X[0] * np.exp(z)).sum()
            params.update({f"bbar_{l + 1}": b[l] for l in range(Mc)})
        subs = dict(zip(sysm.state, y))
        subs.update({p: params[str(p)] for p in sysm.parameters})
        vals = np.array([float(sp.N(r.subs(subs))) for r in res])
        Vdot = spec_block_rhs("softmax", "linear", X, G, V, s, z)[0]
        scale = np.abs(V * Vdot).sum()
        if expect_zero:
            assert np.abs(vals).max() < 1e-12 * max(scale, 1)
        else:
            assert np.abs(vals).max() > 1e-3 * scale


def test_theorem2_reduction_and_closed_form_symbolically():
    sysm = J.theorem2_system(3, 2)
    v1, D1 = sysm.state[0], sysm.parameters[0]
    assert sp.simplify(sysm.rhs[0] - D1 * sp.exp(v1**2 / 2)) == 0  # spec §2.4 printed equation
    vt = sysm.closed_forms["v_1"]
    assert sp.simplify(sp.diff(vt, J.t_sym) - D1 * sp.exp(vt**2 / 2)) == 0
    assert vt.subs(J.t_sym, 0) == 0
    # blow-up: the erfinv argument reaches 1 at t* = sqrt(pi/2)/|Delta|
    tstar = sysm.closed_forms["blow_up_1"].subs(D1, sp.Rational(3, 10))
    assert sp.simplify(sp.sqrt(2 / sp.pi) * sp.Rational(3, 10) * tstar - 1) == 0


def test_theorem2_most_salient_diverges_first_and_others_stay_finite():
    Delta = np.array([0.3, -0.2, 0.1])
    tb = J.blow_up_times(Delta)
    assert int(np.argmin(tb)) == int(np.argmax(np.abs(Delta)))
    # at t* of the salient one, the others equal sqrt(2) erfinv(Delta_l/Delta_*)  (spec §2.4)
    t = tb.min()
    others = np.sqrt(2) * erfinv(np.sqrt(2 / np.pi) * Delta[1:] * t)
    np.testing.assert_allclose(others, np.sqrt(2) * erfinv(Delta[1:] / 0.3), rtol=1e-12)
    assert np.all(np.isfinite(others))


def test_nonlinear_exp_entropy_anchor_values():
    """Spec §4 item 3 (derived anchors): min entropy ~0.150 at t ~0.47, end H(softmax(mu^2/2)) = 1.106."""
    from scipy.integrate import solve_ivp

    mu = np.array(J.FIG4_MU)
    sysm = J.nonlinear_exp_system(len(mu))
    # cross-derivation: Theorem 2's rhs (derived from the block flow) with Delta_l -> mu_l - v_l
    th2 = J.theorem2_system(len(mu), 1)
    for l in range(len(mu)):
        sub = {th2.parameters[l]: sysm.parameters[l] - sysm.state[l], th2.state[l]: sysm.state[l]}
        assert sp.simplify(th2.rhs[l].xreplace(sub) - sysm.rhs[l]) == 0
    f = sysm.to_numpy()
    t = np.linspace(0, 6, 6001)
    sol = solve_ivp(lambda tt, y: f(tt, y, mu), (0, 6), np.zeros(len(mu)), t_eval=t, rtol=1e-10, atol=1e-12, method="LSODA")
    H = sysm.observables_numpy()(sol.y.T, mu)["attention_entropy"]
    i = int(np.argmin(H))
    assert H[0] == pytest.approx(math.log(10), abs=1e-12)
    assert H[i] == pytest.approx(0.150, abs=0.002)
    assert t[i] == pytest.approx(0.47, abs=0.01)
    assert J.fixed_point_entropy(mu, temperature=2.0) == pytest.approx(1.106, abs=1e-3)
    assert H[-1] == pytest.approx(J.fixed_point_entropy(mu), abs=1e-3)
    # exact convergence times t_j(eps) against the ODE's first crossing of (1 - eps) mu_j
    eps = 0.05
    for j in (0, 9):
        tj = J.convergence_time(mu[j], eps)
        cross = t[np.argmax(sol.y[j] >= (1 - eps) * mu[j])]
        assert cross == pytest.approx(tj, abs=2e-3)
    times = [J.convergence_time(m, eps) for m in mu]
    assert np.all(np.diff(times) < 0)  # salient components converge first


@pytest.mark.parametrize("attention", J.ATTENTIONS)
@pytest.mark.parametrize("activation", J.ACTIVATIONS)
def test_population_block_flow_is_the_derived_flow(attention, activation):
    """theory.joma.block_flow (the xp formula the SDE and the mixture ODE use) == sympy rhs."""
    Mc, K, N = 3, 2, 4
    X, G, V, s, z = _random_point(np.random.default_rng(5), Mc, K, N)
    tau = 0.7 if attention != "linear" else 1.0
    sysm = J.block_system(attention, activation, Mc, K, N)
    y, params = _pack(X, G, V, s, z, tau, Mc, K, N)
    want = sysm.to_numpy()(0.0, y, sysm.parameter_vector(params))
    Vd, sd, zd = J.block_flow(attention, activation, X, G, V, s, z, tau)
    np.testing.assert_allclose(np.concatenate([zd, Vd.ravel(), sd]), want, rtol=1e-12, atol=1e-13)


@pytest.mark.slow
def test_fig4_recursion_matches_spec_values():
    """Spec §5 Fig. 4 / §4 item 3: the official update v <- v + eta (mu - v) o softmax(v^2/T), T = 3,
    eta = 0.02, v(0) = 0.05: entropy starts at ln 10 = 2.3026, goes down then up, and ends at the
    fixed point H(softmax(mu^2/3)) = 1.6217 (tolerances: the spec's last printed digit)."""
    mu = np.array(J.FIG4_MU)
    v = np.full(10, 0.05)
    H = []
    for _ in range(150_000):
        a = np.exp(v**2 / 3.0)
        a /= a.sum()
        H.append(-(a * np.log(a)).sum())
        v = v + 0.02 * (mu - v) * a
    H = np.array(H)
    assert H[0] == pytest.approx(2.3026, abs=1e-4)
    assert H[-1] == pytest.approx(1.6217, abs=1e-4)
    assert H.min() < H[-1] - 0.1 and 0 < int(np.argmin(H)) < len(H) - 1  # down, then up


def test_softmax_variant_fixed_point_entropy():
    mu = np.array(J.FIG4_MU)
    assert J.fixed_point_entropy(mu, temperature=3.0) == pytest.approx(1.6217, abs=1e-4)
    sysm = J.nonlinear_softmax_system(len(mu))
    H0 = sysm.observables_numpy()(np.full((1, 10), 0.05), np.concatenate([mu, [3.0]]))["attention_entropy"][0]
    assert H0 == pytest.approx(math.log(10), abs=1e-12)


def test_cooccurrence_matches_spec_formula():
    E, P = J.cooccurrence_formula()
    rho, rho0 = sp.symbols("rho rho0", real=True)
    H = sp.Symbol("H", positive=True, integer=True)
    spec = (1 + 2 * rho**H * rho0 + rho ** (2 * H)) / (2 * (1 + rho**H * rho0))
    assert sp.simplify(P - spec) == 0
    assert sp.simplify(E - rho ** (2 * H)) == 0
    assert sp.simplify(P.subs(rho0, 0) - (1 + rho ** (2 * H)) / 2) == 0
    assert np.all(np.diff(J.cooccurrence_probability(0.6, [1, 2, 3])) < 0)


def test_lca_heights():
    np.testing.assert_array_equal(J.hblt_leaf_lca_heights(3, 2, 0), [0, 1, 2, 2, 3, 3, 3, 3])


def test_stable_rank_and_nc():
    assert J.stable_rank(np.diag([2.0, 1.0, 1.0])) == pytest.approx(1.5)
    assert J.stable_rank(np.ones((4, 3))) == pytest.approx(1.0)
    a = np.arange(5.0)
    assert J.normalised_correlation(a, 3 * a + 1) == pytest.approx(1.0)
    assert J.normalised_correlation(a, -a) == pytest.approx(-1.0)


@pytest.mark.parametrize("field,value", [("temperature", 0.0), ("temperature", -1.0), ("K", 0), ("rho", 1.5),
                                         ("p_top", -0.1), ("depth", 0), ("attention", "cubic"), ("d", 3)])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ConfigError) as e:
        J.JomaConfig().replace(**{field: value})
    assert e.value.field == field or (field == "K" and e.value.field in ("K", "N"))


def test_every_setting_reaches_its_variant_and_ignored_ones_are_errors():
    cfg = J.JomaConfig(lr=0.5, steps=7)
    for v in J.JomaConfig.VARIANTS:
        bound = cfg.replace(variant=v)
        assert bound.lr == 0.5 and bound.steps == 7 and bound.variant == v
    # unset fields follow the variant's defaults
    assert J.JomaConfig().replace(variant="probe").temperature == J.JomaConfig.VARIANT_DEFAULTS["probe"]["temperature"]
    with pytest.raises(ConfigError) as e:
        J.JomaConfig(Mc=4, d=8).replace(variant="hier")
    assert e.value.field in ("Mc", "d")
    with pytest.raises(ConfigError) as e:
        J.JomaConfig(hidden=7).replace(variant="fixed")
    assert e.value.field == "hidden"


def test_variant_only_is_derived_from_what_each_variant_reads():
    """VARIANT_ONLY (the base mechanism's table) names exactly the variants that read a field: every
    listed variant accepts a moved value of it, every other one refuses it; N follows K unless set."""
    C = J.JomaConfig
    moved = {"attention": "softmax", "activation": "tanh", "Mc": 5, "K": 2, "N": 2, "d": 13, "temperature": 0.7,
             "data": "random", "gradient": "random", "init_scale": 0.1, "batch": 2, "data_seed": 3, "depth": 3,
             "branching": 3, "rho": 0.5, "p_top": 0.4, "hblt_samples": 64, "seq_len": 9, "n_per_class": 5, "width": 8,
             "hidden": 6, "nlayer": 1, "wd": 0.0, "vocab": 12, "num_tokens": (6, 3), "num_combinations": (2, 1),
             "n_test": 32, "top": "fixed"}
    assert set(C.VARIANT_ONLY) == set(moved)
    for field, value in moved.items():
        for v in C.VARIANTS:
            extra = {"K": 2} if field == "N" else {}  # the centred G and the CE toy need N == K
            if v in C.VARIANT_ONLY[field]:
                assert getattr(C(variant=v, **{field: value}, **extra), field) == value, (field, v)
            else:
                with pytest.raises(ConfigError) as e:
                    C(variant=v, **{field: value})
                assert e.value.field == field, (field, v)
    assert C(K=5).N == 5 and C(K=5).replace(lr=0.1).N == 5 and C(K=2, N=2).replace(K=2).N == 2
    assert C(K=4, N=6, gradient="random").replace(K=3).N == 6  # an explicit N stays


def test_presets_are_the_figures_settings():
    """Config.preset: the official Figs. 2-3 toy (spec §5), the probe, the headline and Table 1."""
    toy = J.JomaConfig.preset("toy", quick=False)
    assert (toy.variant, toy.attention, toy.Mc, toy.K, toy.N, toy.d, toy.temperature, toy.lr, toy.init_scale,
            toy.steps) == ("ce", "softmax", 20, 20, 20, 30, 0.5, 0.1, 0.01, 2000)
    assert J.JomaConfig.preset("toy", data="random", activation="relu").steps == 1000
    assert J.JomaConfig.preset("headline") == J.JomaConfig(variant="mixture")
    assert (J.JomaConfig.preset("hier").steps, J.JomaConfig.preset("hier", quick=False).steps) == (150, 600)
    with pytest.raises(ConfigError) as e:
        J.JomaConfig.preset("nope")
    assert e.value.field == "preset"


def test_time_unit_is_lr_times_step_and_problem_uses_the_log_grid():
    cfg = J.JomaConfig(lr=0.02, steps=50, log_every=15)
    np.testing.assert_array_equal(cfg.log_steps(), [0, 15, 30, 45, 50])
    np.testing.assert_allclose(cfg.ode_times(), 0.02 * np.array([0, 15, 30, 45, 50]), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(J.problem(cfg).t, cfg.ode_times())
    assert J.JomaConfig(variant="hier").ode_time(40) == 40.0  # Adam: no gradient-flow time


def test_named_intermediates_round_trip_through_json():
    """Softmax/tanh block: A_n and u_n_k are definitions (spec §1.1); JSON -> load_system gives an
    equivalent system, and the numeric rhs (definitions expanded) equals the spec listing."""
    import json

    from theory import load_system, systems_to_json

    sysm = J.block_system("softmax", "tanh", 3, 2, 2)
    assert [str(s) for s, _ in sysm.definitions] == ["A_1", "A_2", "u_1_1", "u_1_2", "u_2_1", "u_2_2"]
    back = load_system(json.loads(systems_to_json("joma", [sysm]))["systems"][0])
    assert back.equivalent(sysm)
    X, G, V, s, z = _random_point(np.random.default_rng(9), 3, 2, 2)
    y, params = _pack(X, G, V, s, z, 1.0, 3, 2, 2)
    got = back.to_numpy()(0.0, y, back.parameter_vector(params))
    Vdot, sdot, zdot = spec_block_rhs("softmax", "tanh", X, G, V, s, z, 1.0)
    np.testing.assert_allclose(got, np.concatenate([zdot, Vdot.ravel(), sdot]), rtol=1e-12, atol=1e-13)
