"""SCB SGD with SVAG's schedule (empirical/scb/svag.py): l SVAG steps move (V, A) over one unit of
time with the mean and covariance of one plain SGD step (the property SVAG's weak-error theorem
rests on), a planted schedule without SVAG's coefficients is caught, and same seed -> same numbers."""

import numpy as np
import pytest

from empirical.scb.svag import svag_runs
from helpers.moments import moment_z_scores
from theory import scb
from theory.errors import ConfigError

# small learning rate: the drift's curvature over one unit of time is negligible against the noise
CFG = scb.SCBConfig(N=3, T=8, Q=2, batch=8, eta_V=0.02, eta_A=0.02, steps=1, log_every=1)


def _increments(traj) -> dict[str, np.ndarray]:
    """Per run: the increments over the run of a few coordinates of V and A, and of a sum of a V
    and an A coordinate (its variance carries their covariance)."""
    V, A = traj["V"].values, traj["A"].values  # (run, time, ...)
    dV, dA = V[:, -1] - V[:, 0], A[:, -1] - A[:, 0]
    return {"V00": dV[:, 0, 0], "V12": dV[:, 1, 2], "A00": dA[:, 0, 0], "A31": dA[:, 3, 1], "A72": dA[:, 7, 2],
            "V00+A00": dV[:, 0, 0] + dA[:, 0, 0]}


def test_svag_steps_keep_one_steps_mean_and_covariance_per_unit_time():
    """l = 2 and l = 4 (l steps at eta/l, gradient c1 g1 + c2 g2 of two fresh minibatches) against
    one plain step at eta: means and variances agree within 4.5 standard errors; the planted bug —
    two plain steps at eta/2, no SVAG coefficients — halves the variance, and the test sees it."""
    runs = 6000
    one = _increments(svag_runs(CFG, runs, l=1, seed=1, keep_parameters=True))
    planted = _increments(svag_runs(CFG.replace(eta_V=0.01, eta_A=0.01, steps=2, log_every=2), runs, l=1, seed=4,
                                    keep_parameters=True))
    for l, seed in ((2, 2), (4, 3)):
        amp = _increments(svag_runs(CFG, runs, l=l, seed=seed, keep_parameters=True))
        for n in one:
            assert one[n].std() > 1e-3 * abs(one[n].mean()) + 1e-9, n  # a coordinate that does move with noise
            z_mean, z_var = moment_z_scores(amp[n], one[n])
            assert abs(z_mean) < 4.5 and abs(z_var) < 4.5, (l, n, z_mean, z_var)
    for n in one:
        assert moment_z_scores(planted[n], one[n])[1] < -6, n


def test_svag_runs_are_reproducible_and_logged_on_the_sde_times():
    cfg = CFG.replace(steps=6, log_every=3)
    a = svag_runs(cfg, 5, l=4, seed=7)
    b = svag_runs(cfg, 5, l=4, seed=7)
    c = svag_runs(cfg, 5, l=4, seed=8)
    name = "value_transition_correlation"
    np.testing.assert_array_equal(a[name].values, b[name].values)
    assert not np.allclose(a[name].values[:, -1], c[name].values[:, -1])
    assert not np.allclose(a[name].values[0], a[name].values[1])  # runs are independent
    np.testing.assert_array_equal(a["time"].values, cfg.ode_times())
    np.testing.assert_array_equal(a["step"].values, [0, 12, 24])
    assert a[name].dtype == np.float64


@pytest.mark.parametrize("bad", [dict(l=0), dict(l=1.5), dict(runs=0)])
def test_bad_input_is_a_config_error(bad):
    kw = {"runs": 2, "l": 1, **bad}
    with pytest.raises(ConfigError):
        svag_runs(CFG, kw.pop("runs"), **kw)


def test_settings_the_sde_does_not_model_are_refused():
    with pytest.raises(ConfigError, match="lam"):
        svag_runs(CFG.replace(lam=0.1), 2)
