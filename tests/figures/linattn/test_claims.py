"""linattn's claims (figures/linattn/claims.py): the theory passes its own criteria and the other
parametrisation's trajectory (a planted violation) fails them."""

import pytest

import simulate
from figures.linattn import claims as C
from theory.linattn import LinAttnConfig, problem


@pytest.fixture(scope="module")
def odes():
    out = {}
    for v in ("merged", "separate"):
        cfg = LinAttnConfig.preset("compare", variant=v)
        out[v] = cfg, simulate.solve(problem(cfg), backend="scipy")
    return out


def test_theory_passes_its_own_criteria(odes):
    cfg, ode = odes["merged"]
    assert C.single_drop(cfg, ode, ode).holds
    cfg, ode = odes["separate"]
    assert C.staircase(cfg, ode, ode).holds


def test_the_other_parametrisation_fails_them(odes):
    cfg, ode = odes["separate"]
    assert not C.single_drop(cfg, ode, ode).holds
    cfg, ode = odes["merged"]
    assert not C.staircase(cfg, ode, ode).holds


def test_learning_order_follows_the_eigenvalues_and_escape_times(odes):
    """Spec §3.2: the separate flow learns component i at about D / (lam_i^2 s_0) (leading order)."""
    import numpy as np

    cfg, ode = odes["separate"]
    lt = C.learning_times(ode, cfg)[0]
    escape = cfg.D / (cfg.lam ** 2 * cfg.init)
    assert np.all(np.diff(lt) > 0)
    np.testing.assert_allclose(lt, escape, rtol=0.1)  # leading order; the log grid is 5 time units
