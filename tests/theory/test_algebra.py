"""theory/algebra.py: coordinates on a span of fixed matrices, bilinear forms from Gram tables, and
the preconditioned flow on the coordinates — checked against the matrices themselves."""

import numpy as np
import sympy as sp

from theory.algebra import BilinearForm, Coords, natural_gradient_flow

RNG = np.random.default_rng(0)
BASIS = [RNG.standard_normal((3, 4)) for _ in range(3)]  # three matrices spanning a subspace of R^{3x4}
GRAM = sp.Matrix(3, 3, lambda i, j: sp.Float(float(np.trace(BASIS[i] @ BASIS[j].T)), 30))
FROB = BilinearForm(GRAM, "tr(X Y^T)")


def _matrix(c: Coords) -> np.ndarray:
    return sum(float(a) * B for a, B in zip(c.coeffs, BASIS))


def test_coords_add_and_scale_like_the_matrices():
    u, v = Coords.of(1, -2, 0.5), Coords.of(0.25, 3, -1)
    np.testing.assert_allclose(_matrix(u + v), _matrix(u) + _matrix(v), rtol=1e-14)
    np.testing.assert_allclose(_matrix(u.scale(-1.5)), -1.5 * _matrix(u), rtol=1e-14)


def test_bilinear_form_is_the_trace_of_the_matrices():
    u, v = Coords.of(1, -2, 0.5), Coords.of(0.25, 3, -1)
    want = np.trace(_matrix(u) @ _matrix(v).T)
    assert abs(float(FROB(u, v)) - want) <= 1e-12 * abs(want)
    assert FROB.metric(2) == 2 * GRAM


def test_flow_on_the_coordinates_is_the_full_flow_restricted_to_the_span():
    """L(V) = |V - V*|_F^2 / 2 with V* in the span: the full gradient flow dV/dt = -rate (V - V*) stays
    in the span, so with the Frobenius metric pulled back (the Gram table) the coordinates obey
    dc/dt = -rate (c - c*) exactly."""
    c = sp.symbols("c0:3", real=True)
    star = Coords.of(0.5, -1, 2)
    diff = Coords(tuple(ci - si for ci, si in zip(c, star.coeffs)))
    loss = FROB(diff, diff) / 2
    rate = sp.Symbol("rate", positive=True)
    rhs = natural_gradient_flow(loss, [(c, FROB.metric(), rate)])
    point = {c[0]: 0.3, c[1]: 0.7, c[2]: -0.2, rate: 1.7}
    want = [-1.7 * (point[ci] - float(si)) for ci, si in zip(c, star.coeffs)]
    np.testing.assert_allclose([float(e.subs(point)) for e in rhs], want, rtol=1e-10)
    # the same velocity as the full flow's, V' = -rate (V - V*), read back in the basis
    full = -1.7 * (_matrix(Coords.of(*[point[ci] for ci in c])) - _matrix(star))
    np.testing.assert_allclose(_matrix(Coords.of(*[float(e.subs(point)) for e in rhs])), full, atol=1e-10)


def test_blocks_have_their_own_metric_and_rate():
    a, b = sp.symbols("a b", real=True)
    loss = a**2 * b + 3 * b
    rhs = natural_gradient_flow(loss, [((a,), sp.Matrix([[2]]), 1), ((b,), sp.Matrix([[4]]), sp.Rational(1, 2))])
    assert sp.simplify(rhs[0] - (-(2 * a * b) / 2)) == 0
    assert sp.simplify(rhs[1] - (-(a**2 + 3) / 8)) == 0
