"""figures/joma/claims.py: the drop-and-bounce numbers behind the entropy claim, on known curves."""

import numpy as np

from figures.joma.claims import bounce_numbers


def test_bounce_numbers_on_known_curves():
    t = np.linspace(0, 10, 101)
    H = 1 + (t - 4) ** 2 / 16  # minimum 1 at t = 4, H0 = 2, H(10) = 3.25
    nums = bounce_numbers(t, H)
    assert nums["t_min"] == 4.0 and nums["drop"] == 1.0 and nums["bounce_fraction"] == 2.25
    assert nums["interior_min"] and nums["single_turning_point"]
    mono = bounce_numbers(t, 2 - t / 10)
    assert not mono["interior_min"] and mono["bounce_fraction"] == 0.0
