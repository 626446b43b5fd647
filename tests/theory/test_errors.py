"""theory/errors.py: every user error is one line naming its field, and keeps what it carries."""

import pytest

from theory.errors import ConfigError, DivergenceError, SolverError, TdynError, check_choice


def test_config_error_names_the_field_on_one_line():
    err = ConfigError("eta_V", "must be > 0,\n  got -1")
    assert isinstance(err, TdynError) and isinstance(err, ValueError)
    assert (err.field, err.message) == ("eta_V", "must be > 0,\n  got -1")
    assert err.one_line() == "eta_V: must be > 0, got -1"


def test_solver_error_carries_time_and_partial_through_a_note():
    partial = object()
    err = SolverError("scb", "symmetric", 3.25, "step size too small", partial=partial)
    assert isinstance(err, RuntimeError)
    assert err.one_line() == "solve: scb/symmetric failed: step size too small (last finite state at t=3.25)"
    noted = err.with_note("partial trajectory kept in x.partial.nc")
    assert noted.partial is partial and noted.t_reached == 3.25 and noted.field == "solve"
    assert noted.one_line().endswith("step size too small; partial trajectory kept in x.partial.nc "
                                     "(last finite state at t=3.25)")


def test_divergence_error_carries_step_and_partial():
    partial = object()
    err = DivergenceError(17, "non-finite loss", partial=partial)
    assert isinstance(err, FloatingPointError) and err.step == 17
    assert err.one_line() == "train: training diverged at step 17: non-finite loss"
    noted = err.with_note("no finite time point, nothing written")
    assert noted.partial is partial
    assert noted.one_line().endswith("non-finite loss; no finite time point, nothing written")


def test_check_choice():
    check_choice("backend", "scipy", ("diffrax", "scipy"))
    with pytest.raises(ConfigError) as info:
        check_choice("backend", "euler", ("diffrax", "scipy"))
    assert info.value.one_line() == "backend: must be one of ('diffrax', 'scipy'), got 'euler'"
