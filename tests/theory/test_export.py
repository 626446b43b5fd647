"""Exports a researcher can paste: JSON parsed by plain parse_expr and read back by load_system,
JAX source that runs under jit and equals the numpy callable, LaTeX under 20 kB that mathtext
renders line by line (pdflatex: tests/theory/test_export_latex.py)."""

import json

import numpy as np
import pytest
import sympy as sp

from figures.papers import PAPERS, get
from theory import ReducedSystem, load_system
from theory.export import systems_to_json, to_source


PAPER_NAMES = tuple(PAPERS)  # every row of the table (its entry points)


def _toy() -> ReducedSystem:
    x, y = sp.symbols("x y", real=True)
    lam, Q = sp.symbols("lam Q", positive=True)
    r = sp.Symbol("r", real=True)
    return ReducedSystem(
        name="toy", paper="toy", state=(x, y), parameters=(lam, Q),
        rhs=(-lam * r + sp.Float(0.1) * y, sp.erf(x) - Q * y), definitions=((r, x * y + sp.Rational(1, 3)),),
        observables={"norm": x**2 + y**2}, invariants={"i": x - y}, closed_forms={"decay": sp.exp(-lam * sp.Symbol("t", real=True))},
    )


def _systems(name):
    row = get(name)
    return row.slot("systems")(row.make_config())


def test_toy_round_trip_and_definitions():
    s = _toy()
    doc = s.to_json()
    back = load_system(json.loads(json.dumps(doc)))
    assert back.equivalent(s)
    assert not back.equivalent(_toy().__class__(**{**_toy().__dict__, "rhs": (sp.Integer(0), sp.Integer(0))}))
    # definitions are printed, then substituted for numbers
    assert r"r &:=" in s.to_latex()
    f = s.to_numpy()
    y, p = np.array([0.3, -0.2]), np.array([1.5, 2.0])
    from scipy.special import erf
    expected = [-1.5 * (0.3 * -0.2 + 1 / 3) + 0.1 * -0.2, erf(0.3) - 2.0 * -0.2]
    np.testing.assert_allclose(f(0.0, y, p), expected, rtol=1e-15)


def _check_jax(system: ReducedSystem, rng):
    import jax

    jax.config.update("jax_enable_x64", True)
    ns: dict = {}
    exec(compile(to_source(system, "jax"), f"<{system.name}>", "exec"), ns)
    rhs = jax.jit(ns["rhs"])
    f = system.to_numpy()
    for _ in range(3):
        y = rng.uniform(0.05, 0.6, len(system.state))
        p = rng.uniform(0.05, 0.6, len(system.parameters))
        ref = f(0.0, y, p)
        got = np.asarray(rhs(0.0, jax.numpy.asarray(y), jax.numpy.asarray(p)))
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(ref).max()))


def test_toy_jax_source_runs_under_jit():
    _check_jax(_toy(), np.random.default_rng(0))


@pytest.mark.parametrize("name", PAPER_NAMES)
def test_paper_json_parses_with_plain_parse_expr(name):
    systems = _systems(name)
    doc = json.loads(systems_to_json(name, systems))
    for sysdoc, system in zip(doc["systems"], systems):
        local = {n: sp.Symbol(n) for n in sysdoc["state"] + sysdoc["parameters"]}
        local.update({n: sp.Symbol(n) for n, _ in sysdoc["definitions"]})
        for expr in [*sysdoc["rhs"].values(), *(e for _, e in sysdoc["definitions"]),
                     *sysdoc["observables"].values()]:
            sp.parse_expr(expr, local_dict=local)
        assert load_system(sysdoc).equivalent(system)


@pytest.mark.parametrize("name", PAPER_NAMES)
def test_paper_jax_source_runs_under_jit(name):
    rng = np.random.default_rng(1)
    for system in _systems(name):
        _check_jax(system, rng)


@pytest.mark.parametrize("name", PAPER_NAMES)
def test_paper_latex_small_and_renders(name):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.mathtext import MathTextParser

    parser = MathTextParser("agg")
    systems = _systems(name)
    text = "\n".join(s.to_latex() for s in systems)
    assert len(text.encode()) < 20_000, f"{name}: {len(text.encode())} bytes of LaTeX"
    for s in systems:
        for line in s.to_latex().splitlines():
            if not line.startswith(("%", "\\begin{align}", "\\end{align}")):
                parser.parse("$" + line.removesuffix(" \\\\").removesuffix(" \\nonumber").replace("&", "") + "$")


def test_unsimplified_noise_round_trips_as_equivalent():
    """A noise derived with ``simplify=False`` holds expressions that sympy regroups on parsing
    (``x/(2*(a + b))`` -> ``x/(2*a + 2*b)``); the JSON round trip is still equivalent."""
    from theory.noise import Finite, derive_noise

    th = sp.Symbol("th", real=True)
    y, a, b = sp.symbols("y a b", positive=True)
    loss = -sp.log(y * sp.exp(th) + a + b)  # E[g] = a e^th/(2 (a e^th + a + b)) + ...
    noise = derive_noise(loss, (th,), (y,), Finite.categorical(y, (a, b), (sp.Rational(1, 2), sp.Rational(1, 2))),
                         simplify=False, covariance=False)
    assert "/(2*(" in str(noise.mean[0])  # the form sympy regroups on parsing
    s = ReducedSystem(name="n", paper="toy", state=(th,), parameters=(a, b), rhs=(-th,), noise=noise)
    back = load_system(json.loads(systems_to_json("toy", [s]))["systems"][0])
    assert back.equivalent(s)
    other = ReducedSystem(name="n", paper="toy", state=(th,), parameters=(a, b), rhs=(-th,),
                          noise=derive_noise(2 * loss, (th,), (y,), noise.distribution, simplify=False,
                                             covariance=False))
    assert not other.equivalent(s)
