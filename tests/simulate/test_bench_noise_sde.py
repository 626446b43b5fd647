"""`make bench` row of the generic minibatch SDE (simulate.noise_sde) on the linear-regression toy:
1000 paths over its horizon (2000 optimiser steps, one Euler–Maruyama step per optimiser step),
warm, jax and numba engines (goal <= 10 s on 2 cores). The per-paper rows use the same
helpers.bench_sde.bench_sde."""

import pytest

from helpers import linreg_toy as toy
from helpers.bench_sde import bench_sde
from simulate import noise_sde

pytestmark = pytest.mark.benchmark


def test_bench_generic_sde_on_the_toy(bench_row, benchmark):
    cfg = toy.LinRegConfig(lr=0.01, batch=8, steps=2000, log_every=20)
    model, t = noise_sde(toy.problem(cfg))
    bench_sde(bench_row, benchmark, "generic SDE, linreg toy (ldl factor)", model, t)
