"""`make bench` row of JoMA's block SDE: 1000 paths over the compare horizon (the
derivation check's block, 2600 optimiser steps to t = 13, one Euler–Maruyama step per optimiser
step), warm, jax and numba engines, path-steps/s; goal <= 10 s on 2 cores."""

import pytest

from helpers.bench_sde import bench_sde
from theory import joma as J

pytestmark = pytest.mark.benchmark


def test_bench_joma_block_sde(bench_row, benchmark):
    model, t = J.minibatch_sde(J.JomaConfig())
    bench_sde(bench_row, benchmark, "joma block SDE, 27 states (outcomes factor)", model, t)
