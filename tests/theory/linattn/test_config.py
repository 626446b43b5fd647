"""linattn Config (theory/linattn/config.py) and Problem (theory/linattn/problem.py)."""

import numpy as np
import pytest

from theory import ConfigError
from theory.linattn import LinAttnConfig, problem
from theory.linattn.population import aligned_parameters, gamma_merged, gamma_separate


@pytest.mark.parametrize("changes,field", [
    (dict(lams=(1.0, 0.5)), "lams"), (dict(lams=(0.5, 1.0, 0.2)), "lams"), (dict(lams=(1.0, 0.0, -1.0)), "lams"),
    (dict(init=0.0), "init"), (dict(mode="adam"), "mode"), (dict(init_kind="ones"), "init_kind"),
    (dict(variant="merged", R=2), "R"), (dict(R=4), "R"), (dict(N=0), "N"),
])
def test_bad_settings_name_their_field(changes, field):
    with pytest.raises(ConfigError) as e:
        LinAttnConfig(**changes)
    assert e.value.field == field


def test_time_unit_is_lr_times_step():
    c = LinAttnConfig(lr=0.3, steps=100, log_every=40)
    np.testing.assert_allclose(c.ode_times(), [0.0, 12.0, 24.0, 30.0])
    assert problem(c).t.tolist() == c.ode_times().tolist()


@pytest.mark.parametrize("variant,H,R", [("merged", 2, 1), ("separate", 3, 1), ("separate", 2, 2)])
def test_problem_starts_at_the_aligned_parameters(variant, H, R):
    c = LinAttnConfig(variant=variant, H=H, **({"R": R} if variant == "separate" else {}))
    prob = problem(c)
    obs = prob.system.observables_numpy()(np.asarray(prob.y0)[None], prob.system.parameter_vector(prob.params))
    params = aligned_parameters(c)
    gamma = gamma_merged(*params) if variant == "merged" else gamma_separate(*params)
    np.testing.assert_allclose([obs[f"gamma_{i + 1}"][0] for i in range(c.D)], np.diagonal(gamma), rtol=1e-14)
    assert np.count_nonzero(gamma - np.diag(np.diagonal(gamma))) == 0


def test_random_start_is_not_reduced():
    with pytest.raises(ConfigError) as e:
        problem(LinAttnConfig(init_kind="random"))
    assert e.value.field == "init_kind"
