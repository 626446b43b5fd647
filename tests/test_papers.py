"""The paper table: every row fills every slot (or says why not), and time lives in the Config."""

import inspect

import numpy as np
import pytest

from figures.papers import PAPERS, SLOTS, Paper, get
from theory import ConfigError, ParamsBase, Problem

def test_every_slot_filled_or_explained():
    assert set(PAPERS) >= {"scb", "scan-snap", "topic", "joma"}
    for row in PAPERS.values():
        for slot in SLOTS:
            ref = getattr(row, slot)
            if ref is None:
                assert row.missing.get(slot), f"{row.name}: empty slot {slot} without a reason"
                with pytest.raises(ConfigError):
                    row.slot(slot)
            elif slot == "figures" and not callable(row.slot(slot)):  # a FIGURES tuple of figure functions
                assert row.slot(slot) and all(callable(f) for f in row.slot(slot)), f"{row.name}.{slot}"
            else:
                assert callable(row.slot(slot)), f"{row.name}.{slot}"


def test_row_without_reason_is_refused():
    with pytest.raises(ValueError, match="sde"):
        Paper(name="x", title="", spec="", config=ParamsBase, systems=len, problem=len, train=len,
              compare=len, figures=len, sde=None)


def test_unknown_paper_and_variant():
    with pytest.raises(ConfigError, match="paper"):
        get("nope")
    with pytest.raises(ConfigError, match="variant"):
        get("scb").check_variant("nope")


@pytest.mark.parametrize("name", ["scb", "scan-snap", "topic", "joma"])
def test_time_lives_in_the_config(name):
    row = get(name)
    cfg = row.make_config()
    steps = cfg.log_steps()
    assert steps[0] == 0 and steps[-1] == cfg.steps and np.all(np.diff(steps) > 0)
    problem = row.slot("problem")(cfg)
    assert isinstance(problem, Problem)
    np.testing.assert_array_equal(problem.t, cfg.ode_times())
    # the figures/compare slots share one signature
    assert {"quick", "device"} <= set(inspect.signature(row.slot("compare")).parameters)
    figs = row.slot("figures")
    for fig in [figs] if callable(figs) else figs:
        assert {"quick", "device"} <= set(inspect.signature(fig).parameters)
    train_params = set(inspect.signature(row.slot("train")).parameters)
    assert {"device", "variant", "progress", "checkpoint", "checkpoint_every", "resume"} <= train_params


def test_log_steps_include_last_step_when_log_every_does_not_divide():
    from theory.params import log_steps

    np.testing.assert_array_equal(log_steps(10, 4), [0, 4, 8, 10])
    np.testing.assert_array_equal(log_steps(8, 4), [0, 4, 8])
    with pytest.raises(ConfigError, match="log_every"):
        log_steps(8, 0)


@pytest.mark.parametrize("name", ["scb", "topic"])
def test_solve_of_a_problem_records_the_full_config(name):
    import simulate
    from simulate.trajectory import config_of

    row = get(name)
    cfg = row.make_config()
    traj = simulate.solve(row.slot("problem")(cfg), backend="scipy")
    assert config_of(traj) == json_roundtrip(cfg.to_dict())


def json_roundtrip(d):
    import json

    from simulate.trajectory import jsonable

    return json.loads(json.dumps(jsonable(d)))
