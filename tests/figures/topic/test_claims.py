"""figures.topic.claims: the deciding code on planted trajectories and rows (each criterion holds
on a planted instance of the claim and fails on a planted violation), and the derived tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from figures.topic import claims as C
from theory import topic as th

JOINT = th.TopicConfig.preset("two_stage")


def _norms(V, K, Q=None):
    t = np.arange(len(V), dtype=float) * 10
    Q = K if Q is None else Q
    return xr.Dataset({"norm_W_V": ("time", np.asarray(V, float)), "norm_W_K": ("time", np.asarray(K, float)),
                       "norm_W_Q": ("time", np.asarray(Q, float))}, coords={"time": t})


def test_onset_tolerance_is_derived_from_the_escape_rate():
    """The tolerance terms: one logging interval, |ln sqrt(d_a/2)|/rho and 1/rho (independent
    arithmetic on the spec's quantities, the two_stage preset's sizes: d_a = D = 7)."""
    cfg = JOINT
    rho = cfg.lr * 0.03125 / np.sqrt(7)
    tol = C.onset_tolerance(cfg, rho, 7)
    assert tol["logging"] == cfg.log_every
    assert tol["initial_amplitude"] == pytest.approx(0.5 * np.log(3.5) / rho, rel=1e-12)
    assert tol["total"] == pytest.approx(cfg.log_every + (0.5 * np.log(3.5) + 1) / rho, rel=1e-12)


def test_two_stage_check_on_planted_norms():
    """W_V rises to its plateau (1.0) by t = 20, K/Q stay ~0 until t = 50 and end at 4: t_V80 = 20
    (0.8 reached), t_KQ10 = 50 (0.4 = 10% of 4), onset (||W_K|| >= 1) at t = 60. A planted
    violation (K/Q grow first) fails the criterion."""
    V = [0.0, 0.5, 0.9, 1.0, 1.0, 1.0, 1.1, 1.2, 1.3]
    K = [0.01, 0.01, 0.01, 0.02, 0.03, 0.5, 1.5, 3.0, 4.0]
    c = C.two_stage_check(_norms(V, K))
    assert (c["t_V80"], c["t_KQ10"], c["onset_measured"], c["V_plateau"]) == (20.0, 50.0, 60.0, 1.0)
    assert c["two_stages"] and (c["K_final"], c["Q_final"]) == (4.0, 4.0)
    K_first = [0.01, 0.5, 1.5, 3.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    assert not C.two_stage_check(_norms(V, K_first))["two_stages"]


def _row(opt, lr, same, uniform, diff, dropped=""):
    return {"optimizer": opt, "lr": lr, "steps": 5000, "dropped": dropped, "gamma_hat": same / diff,
            "ordering_holds": bool(same > uniform > diff)}


def test_table_claim_judges_the_rows_that_ran():
    rows = [_row("adam", 0.01, 0.015, 0.01, 0.004), _row("sgd", 0.01, 0.0, 0.0, 1.0, dropped="budget")]
    claim = C.table_claim(rows)
    assert claim.holds and claim.evidence == {"adam_0.01_gamma_hat": pytest.approx(0.015 / 0.004)}
    assert not C.table_claim(rows + [_row("adam", 0.03, 0.009, 0.01, 0.011)]).holds  # planted violation
    assert not C.table_claim([rows[1]]).holds  # nothing ran: nothing shown
