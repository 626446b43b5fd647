"""theory/scan_snap/problem.py: the T = inf problem on config.ode_times(), both backends, its exact
invariants and Theorem 2's signs."""

import numpy as np

from theory import scan_snap as ss


def test_full_ode_backends_agree_and_invariants_and_theorem2():
    import simulate as sim

    cfg = ss.Config(steps=40, log_every=4, momentum=0.0, eta_Y=1.0, eta_Z=1.0, num_unique_per_next=5, num_common=4)
    prob = ss.problem(cfg)
    np.testing.assert_array_equal(prob.t, cfg.ode_times())
    a = sim.solve(prob, backend="scipy")
    b = sim.solve(prob, backend="diffrax")
    for n in prob.system.state_names:
        np.testing.assert_allclose(a[n].values, b[n].values, rtol=1e-6, atol=1e-9)
    task = ss.make_task(cfg)
    Yall = np.stack([a[n].values for n in prob.system.state_names], -1)
    Y, Z = ss.embed_symmetric_state(task, Yall)
    assert np.abs(Y.sum(-1)).max() < 1e-9 and np.abs(Z.sum(-1)).max() < 1e-9  # row sums stay 0
    # Theorem 2 signs: DT logits rise, the common-token logit falls
    assert np.all(np.diff(a.z_c.values) < 0)
    for j in range(5):
        assert np.all(np.diff(a[f"z_dt_{j}"].values) > 0)
    # scanning order: the most probable DT gains the most
    last = [a[f"z_dt_{j}"].values[-1] for j in range(5)]
    assert np.all(np.diff(last) > 0)
