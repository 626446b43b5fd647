"""theory.topic.problem: the stage-1 Problem on the Trainer's grid, both ODE backends against the
derived closed form."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from theory import topic as tp


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
