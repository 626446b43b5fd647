"""theory/scan_snap/population.py: observables of full parameters (docs/papers/scan_snap.md §4 reference values) and
the symmetric-coordinate means of Y."""

import math

import numpy as np

from theory import scan_snap as ss


def test_reference_entropies_and_initial_loss():
    cfg = ss.Config()
    task = ss.make_task(cfg)
    Y = np.zeros((task.M_in, task.M_out))
    Z = np.zeros((task.M_in, task.M_in))
    obs = ss.observables_from_parameters(Y, Z, task)
    assert math.isclose(obs["dt_entropy"], 2.151, abs_tol=5e-4)
    assert math.isclose(obs["population_loss"], math.log(34), rel_tol=1e-12)
    assert math.isclose(math.log(34), 3.526, abs_tol=5e-4)
    # P^2 profile (z = log P on the DTs) -> 1.921
    Z[task.query[0], task.dt[0]] = np.log(task.P[0, task.dt[0]])
    assert math.isclose(ss.entropy(task.P[0, task.dt[0]] ** 2), 1.921, abs_tol=5e-4)
    assert math.isclose(ss.observables_from_parameters(Y, Z, task)["dt_entropy"], (2.151 + 1.921) / 2, abs_tol=1e-3)


def test_y_coordinates_logged_equal_the_parameters_group_means():
    """The logged Y coordinates are the group means of Y (exact on the symmetric subspace): embed a
    symmetric state, read it back."""
    cfg = ss.Config(num_unique_per_next=4, num_common=3)
    task = ss.make_task(cfg)
    sysm = ss.full_system(cfg)
    y = np.random.default_rng(3).normal(size=len(sysm.state))
    Y, _ = ss.embed_symmetric_state(task, y)
    got = ss.symmetric_y_coordinates(task, Y)
    for i, name in enumerate(sysm.state_names):
        if name.startswith("Y_"):
            assert math.isclose(float(got[name]), y[i], rel_tol=1e-14, abs_tol=1e-15), name
