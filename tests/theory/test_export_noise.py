"""The minibatch noise in every export (``tdyn derive P --format json|python|latex``): the exported
per-sample flow is ``-P`` times the finite-difference gradient of the exported per-sample loss, the
exported covariance (where the export says it is exact) matches an independent Monte-Carlo estimate
of the per-sample gradient covariance within its standard error, and a noise whose covariance has no
closed form says so (``exact: false``, no ``covariance``, "Monte Carlo" in the LaTeX)."""

import json

import numpy as np
import pytest
import sympy as sp

from figures.papers import get
from theory.export import to_latex, to_source
from theory.topic.config import TopicConfig

#: the exact full-space topic system is built in sympy for a small vocabulary only (D = Tv + 1 = 5)
TOPIC_SMALL = TopicConfig(T=2, v=2, tau=1)


def _noisy(name):
    """The systems of paper ``name`` that carry a noise (topic: its small full-space instance)."""
    row = get(name)
    cfg = TOPIC_SMALL if name == "topic" else row.make_config()
    return [s for s in row.slot("systems")(cfg) if s.noise is not None]


#: scan-snap's 43-state flow and topic's 30 x 30 covariance take half a minute each to export: make test-slow
@pytest.fixture(scope="module", params=["scb", "joma", pytest.param("scan-snap", marks=pytest.mark.slow),
                                        pytest.param("topic", marks=pytest.mark.slow)])
def noisy(request):
    systems = _noisy(request.param)
    assert systems, f"{request.param}: no system carries a noise"
    return request.param, systems


def _source(system) -> dict:
    ns: dict = {}
    exec(compile(to_source(system, "numpy"), f"<{system.name}>", "exec"), ns)
    return ns


def _point(system, rng, doc):
    """Random state, parameters (positive) and sample values (positive: counts and frequencies)."""
    y = rng.uniform(-0.5, 0.5, len(system.state))
    p = rng.uniform(0.2, 0.8, len(system.parameters))
    x = rng.uniform(0.1, 1.0, len(doc["samples"]))
    return y, p, x


def test_every_paper_exports_a_noise_and_says_how_exact_it_is(noisy):
    name, systems = noisy
    for s in systems:
        doc = json.loads(json.dumps(s.to_json()))["noise"]
        written = doc["covariance"] is not None or doc["distribution"]["kind"] == "finite"
        implicit = doc["covariance"] is None and doc["method"] == "moments"  # from the closed-form law's moments
        assert doc["exact"] == (written or implicit), f"{name}/{s.name}: exact={doc['exact']} for {doc['method']}"
        assert (doc["mean"] is not None) == doc["exact"]
        ns = _source(s)
        meta = ns["NOISE"]  # the source of one system: names without a suffix
        assert meta["exact"] == doc["exact"] and meta["method"] == doc["method"]
        assert ("covariance" in ns) == written
        text = to_latex(s)
        assert r"\Sigma(\theta)" in text
        assert ("Monte Carlo" in text) == (doc["method"] == "monte_carlo")
        assert ("moment generating" in text) == implicit


def test_per_sample_flow_is_minus_P_times_the_gradient_of_the_per_sample_loss(noisy):
    """Central differences of the exported per-sample loss (parsed from the JSON), mapped by the
    exported preconditioner, against the exported source's ``per_sample_flow``."""
    name, systems = noisy
    rng = np.random.default_rng(0)
    for s in systems:
        doc = json.loads(json.dumps(s.to_json()))
        nd = doc["noise"]
        syms = {n: sp.Symbol(n, **a) for n, a in doc["symbols"].items()}
        syms.update({n: syms.get(n, sp.Symbol(n)) for n in nd["samples"]})
        state = [syms[n] for n in nd["state"]]
        params, samples = [syms[n] for n in doc["parameters"]], [syms[n] for n in nd["samples"]]
        loss = sp.parse_expr(nd["per_sample_loss"], local_dict=syms)
        defs = [(syms[n], sp.parse_expr(e, local_dict=syms)) for n, e in doc["definitions"]]
        for sym, e in reversed(defs):
            loss = loss.xreplace({sym: e})
        assert loss.free_symbols <= set(state) | set(params) | set(samples)
        f_loss = sp.lambdify((state, params, samples), loss, "numpy")
        P = sp.Matrix([[sp.parse_expr(e, local_dict=syms) for e in row] for row in nd["preconditioner"]])
        f_P = sp.lambdify((state, params), P, "numpy")
        flow = _source(s)["per_sample_flow"]  # the source of one system: names without a suffix
        for _ in range(2):
            y, p, x = _point(s, rng, nd)
            h = 1e-6
            grad = np.array([(f_loss(y + h * e, p, x) - f_loss(y - h * e, p, x)) / (2 * h) for e in np.eye(len(y))])
            Pm = np.asarray(f_P(y, p), float)
            want = -(Pm[0, 0] * grad if Pm.shape == (1, 1) else Pm[:, 0] * grad if Pm.shape[1] == 1 else Pm @ grad)
            got = np.asarray(flow(y, p, x), float)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * max(1.0, np.abs(want).max()),
                                       err_msg=f"{name}/{s.name}")


def _mc_check(flow, cov, y, p, xs):
    """Sample covariance of ``flow`` over the draws ``xs`` against ``cov`` entry by entry, within 6
    Monte-Carlo standard errors (the entries' own sample spread over sqrt(n))."""
    G = np.stack([np.asarray(flow(y, p, x), float) for x in xs])
    dev = G - G.mean(0)
    prods = dev[:, :, None] * dev[:, None, :]
    est, se = prods.mean(0), prods.std(0) / np.sqrt(len(xs))
    want = np.asarray(cov(y, p), float)
    z = np.abs(est - want) / np.maximum(se, 1e-12 * max(1.0, np.abs(want).max()))
    assert z.max() < 6, f"worst entry {np.unravel_index(z.argmax(), z.shape)}: {z.max():.1f} standard errors"
    assert np.abs(want).max() > 10 * se.max()  # the check can see the covariance, not only its noise


def test_joma_covariance_matches_monte_carlo_over_the_rows():
    """JoMA: rows drawn uniformly with replacement (numpy), per-sample flows from the export."""
    (s,) = _noisy("joma")
    ns, rng = _source(s), np.random.default_rng(1)
    dist = s.noise.distribution
    y, p = rng.uniform(-0.5, 0.5, len(s.state)), rng.uniform(0.2, 0.8, len(s.parameters))
    values = dict(zip(s.parameters, p))
    rows = [[float(sp.sympify(o[x]).xreplace(values)) for x in s.noise.samples] for o in dist.outcomes]
    xs = [rows[i] for i in rng.integers(0, len(rows), 20000)]
    _mc_check(ns["per_sample_flow"], ns["covariance"], y, p, xs)


def test_topic_covariance_matches_monte_carlo_over_documents():
    """Topic (small vocabulary): the topic set uniform, the context x_bar_S of the document law and
    the label frequencies Multinomial(n_sel, u_S)/n_sel drawn by numpy."""
    from theory.topic.derive import _document_vectors

    (s,) = _noisy("topic")
    ns, rng = _source(s), np.random.default_rng(2)
    values = {"p_m": 0.3, "p_c": 0.2, "p_r": 0.2, "lam": 0.01, "eta": 0.1, "n_sel": 6}
    p = np.array([values[str(x)] for x in s.parameters], float)
    y = rng.uniform(-0.5, 0.5, len(s.state))
    docs = [([float(sp.sympify(e).xreplace({x: values[x.name] for x in sp.sympify(e).free_symbols})) for e in xbar],
             np.array([float(u) for u in us])) for _, xbar, us in _document_vectors(TOPIC_SMALL)]
    xs = []
    for k in rng.integers(0, len(docs), 20000):
        xbar, u = docs[k]
        xs.append([*xbar, *(rng.multinomial(values["n_sel"], u) / values["n_sel"])])
    _mc_check(ns["per_sample_flow"], ns["covariance"], y, p, xs)
