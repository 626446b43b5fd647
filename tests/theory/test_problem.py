"""theory/problem.py: a Problem carries what simulate.solve needs; its per-backend options are used
unless a keyword overrides them, and its config is recorded in the trajectory."""

import json

import numpy as np
import sympy as sp

import simulate
from simulate.trajectory import config_of
from theory.core import ReducedSystem
from theory.problem import Problem

x = sp.Symbol("x", real=True)
k = sp.Symbol("k", positive=True)


def _decay_problem(**kw):
    S = ReducedSystem(name="decay", paper="test", state=(x,), parameters=(k,), rhs=(-k * x,))
    return Problem(S, {"k": 2.0}, {"x": 1.0}, np.linspace(0.0, 1.0, 5),
                   {"scipy": {"method": "RK23", "rtol": 1e-6, "atol": 1e-9}}, **kw)


def test_options_are_a_copy_per_backend():
    p = _decay_problem()
    opts = p.options("scipy")
    opts["method"] = "changed"
    assert p.options("scipy")["method"] == "RK23" and p.options("diffrax") == {}


def test_solve_uses_the_problems_options_and_records_its_config():
    p = _decay_problem(config={"k": 2.0, "note": "a dict config"})
    tr = simulate.solve(p, backend="scipy")
    assert tr.attrs["message"].startswith("The solver successfully")
    assert simulate.parameter_values_of(tr)["method"] == "RK23"
    np.testing.assert_allclose(tr.x.values, np.exp(-2.0 * p.t), rtol=1e-4)  # RK23 at rtol 1e-6
    assert config_of(tr) == {"k": 2.0, "note": "a dict config"}
    again = simulate.solve(p, backend="scipy", method="DOP853", rtol=1e-12, atol=1e-14)  # keywords win
    assert simulate.parameter_values_of(again)["method"] == "DOP853"
    np.testing.assert_allclose(again.x.values, np.exp(-2.0 * p.t), rtol=1e-10)
    assert json.loads(again.attrs["config"]) == {"k": 2.0, "note": "a dict config"}
