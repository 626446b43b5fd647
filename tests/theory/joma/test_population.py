"""theory/joma/population.py: the array formulas against the derivation and closed forms (block flow
== derived rhs, blow-up times, fixed-point entropies, Fig. 4's recursion, LCA heights, stable rank,
normalised correlation)."""

import math

import numpy as np
import pytest
from scipy.special import erfinv

from helpers.joma import pack, random_point
from theory import joma as J


@pytest.mark.parametrize("attention", J.ATTENTIONS)
@pytest.mark.parametrize("activation", J.ACTIVATIONS)
def test_population_block_flow_is_the_derived_flow(attention, activation):
    """theory.joma.block_flow (the xp formula the SDE and the mixture ODE use) == sympy rhs."""
    Mc, K, N = 3, 2, 4
    X, G, V, s, z = random_point(np.random.default_rng(5), Mc, K, N)
    tau = 0.7 if attention != "linear" else 1.0
    sysm = J.block_system(attention, activation, Mc, K, N)
    y, params = pack(X, G, V, s, z, tau, Mc, K, N)
    want = sysm.to_numpy()(0.0, y, sysm.parameter_vector(params))
    Vd, sd, zd = J.block_flow(attention, activation, X, G, V, s, z, tau)
    np.testing.assert_allclose(np.concatenate([zd, Vd.ravel(), sd]), want, rtol=1e-12, atol=1e-13)


def test_theorem2_most_salient_diverges_first_and_others_stay_finite():
    Delta = np.array([0.3, -0.2, 0.1])
    tb = J.blow_up_times(Delta)
    assert int(np.argmin(tb)) == int(np.argmax(np.abs(Delta)))
    # at t* of the salient one, the others equal sqrt(2) erfinv(Delta_l/Delta_*)  (docs/papers/joma.md §2.4)
    t = tb.min()
    others = np.sqrt(2) * erfinv(np.sqrt(2 / np.pi) * Delta[1:] * t)
    np.testing.assert_allclose(others, np.sqrt(2) * erfinv(Delta[1:] / 0.3), rtol=1e-12)
    assert np.all(np.isfinite(others))


def test_softmax_variant_fixed_point_entropy():
    mu = np.array(J.FIG4_MU)
    assert J.fixed_point_entropy(mu, temperature=3.0) == pytest.approx(1.6217, abs=1e-4)
    sysm = J.nonlinear_softmax_system(len(mu))
    H0 = sysm.observables_numpy()(np.full((1, 10), 0.05), np.concatenate([mu, [3.0]]))["attention_entropy"][0]
    assert H0 == pytest.approx(math.log(10), abs=1e-12)


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


def test_lca_heights():
    np.testing.assert_array_equal(J.hblt_leaf_lca_heights(3, 2, 0), [0, 1, 2, 2, 3, 3, 3, 3])


def test_stable_rank_and_nc():
    assert J.stable_rank(np.diag([2.0, 1.0, 1.0])) == pytest.approx(1.5)
    assert J.stable_rank(np.ones((4, 3))) == pytest.approx(1.0)
    a = np.arange(5.0)
    assert J.normalised_correlation(a, 3 * a + 1) == pytest.approx(1.0)
    assert J.normalised_correlation(a, -a) == pytest.approx(-1.0)
