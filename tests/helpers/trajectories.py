"""Trajectory comparisons shared by the resume and re-run tests."""

import numpy as np


def assert_same(a, b):
    """Same variables, same time grid, every value bit for bit."""
    assert sorted(a.data_vars) == sorted(b.data_vars)
    np.testing.assert_array_equal(a.time.values, b.time.values)
    for v in a.data_vars:
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)
