"""theory/core.py: ReducedSystem checks its names; its numeric callables come from one lambdify path
that honours ``definitions``, and each is built once per system object (the cache the solvers use)."""

import pickle

import numpy as np
import pytest
import sympy as sp

from theory.core import TIME, ReducedSystem
from theory.errors import ConfigError

x, y = sp.symbols("x y", real=True)
k, s = sp.symbols("k s", positive=True)
r = sp.Symbol("r", real=True)


def _system(diffusion=True):
    """A 2-D flow whose rhs, observable and diffusion all use the definition ``r = x y + 1/3``."""
    return ReducedSystem(
        name="defs", paper="test", state=(x, y), parameters=(k, s),
        rhs=(-k * r + sp.sin(y), x - k * y * r), definitions=((r, x * y + sp.Rational(1, 3)),),
        diffusion=sp.Matrix([[s * r, 0], [0, s * x]]) if diffusion else None,
        observables={"r_obs": r * x}, closed_forms={"decay": sp.exp(-k * TIME) + r},
    )


Y, P = np.array([0.3, -0.7]), np.array([1.5, 0.2])
R = 0.3 * -0.7 + 1 / 3


def test_callables_are_built_once_per_system():
    S = _system()
    for name in ("to_numpy", "to_jax", "jacobian_numpy", "diffusion_jax", "observables_numpy",
                 "closed_forms_numpy"):
        assert getattr(S, name)() is getattr(S, name)(), name
    other = _system()
    assert other.to_numpy() is not S.to_numpy()  # per object, not per structurally equal system


def test_every_callable_evaluates_the_definitions():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    S = _system()
    want = [-1.5 * R + np.sin(-0.7), 0.3 - 1.5 * -0.7 * R]
    np.testing.assert_allclose(S.to_numpy()(0.0, Y, P), want, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(S.to_jax()(0.0, jnp.asarray(Y), jnp.asarray(P))), want, rtol=1e-15)
    np.testing.assert_allclose(S.observables_numpy()(Y[None], P)["r_obs"], [R * 0.3], rtol=1e-15)
    np.testing.assert_allclose(S.closed_forms_numpy()(2.0, P, Y)["decay"], np.exp(-3.0) + R, rtol=1e-15)
    # the diffusion used to be lambdified apart, without the definitions (a NameError on r)
    g = np.asarray(S.diffusion_jax()(0.0, jnp.asarray(Y), jnp.asarray(P)))
    np.testing.assert_allclose(g, [[0.2 * R, 0.0], [0.0, 0.2 * 0.3]], rtol=1e-15)


def test_jacobian_matches_central_differences():
    S = _system()
    f, J = S.to_numpy(), S.jacobian_numpy()(0.0, Y, P)
    h = 1e-6
    fd = np.stack([(f(0.0, Y + h * e, P) - f(0.0, Y - h * e, P)) / (2 * h) for e in np.eye(2)], axis=1)
    assert J.shape == (2, 2) and J.dtype == np.float64
    np.testing.assert_allclose(J, fd, rtol=1e-8, atol=1e-10)


def test_ode_has_no_diffusion_callable():
    with pytest.raises(ConfigError, match="no diffusion"):
        _system(diffusion=False).diffusion_jax()


def test_compiled_callables_are_not_pickled():
    S = _system()
    S.to_numpy()
    back = pickle.loads(pickle.dumps(S))
    assert back.equivalent(S)
    np.testing.assert_array_equal(back.to_numpy()(0.0, Y, P), S.to_numpy()(0.0, Y, P))


def test_names_must_be_identifiers():
    bad = sp.Symbol("lambda")
    with pytest.raises(ValueError, match="identifier"):
        ReducedSystem(name="b", paper="b", state=(bad,), parameters=(), rhs=(bad,))
    with pytest.raises(ValueError, match="identifier"):
        ReducedSystem(name="b", paper="b", state=(sp.Symbol("z[1]"),), parameters=(), rhs=(sp.Integer(0),))
