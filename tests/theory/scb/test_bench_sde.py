"""`make bench` rows of SCB's SDEs, through helpers.bench_sde: the reduced SDE (the paper table's ``sde`` slot; jax
engine) and the full (V, A) SDE (its compiled numba step; the derived model's jax engine is ~100x
slower per path-step and is timed at the same horizon with fewer paths). Horizon: the compare
preset's quick config (N=3, T=16, 600 optimiser steps, one Euler–Maruyama step per optimiser step)."""

import pytest

from helpers.bench_sde import bench_sde
from theory import scb

pytestmark = pytest.mark.benchmark

CFG = scb.SCBConfig.preset("compare", quick=True)


def test_bench_reduced_sde_over_the_compare_horizon(bench_row, benchmark):
    model, t = scb.minibatch_sde_reduced(CFG)
    bench_sde(bench_row, benchmark, "scb reduced SDE (sde slot), compare horizon", model, t, backends=("jax",))


def test_bench_full_sde_over_the_compare_horizon(bench_row, benchmark):
    model, t = scb.minibatch_sde(CFG)
    bench_sde(bench_row, benchmark, "scb full (V, A) SDE, compare horizon", model, t, backends=("numba",))


def test_bench_full_sde_jax_engine_over_the_compare_horizon(bench_row, benchmark):
    model, t = scb.minibatch_sde(CFG)
    bench_sde(bench_row, benchmark, "scb full (V, A) SDE, compare horizon, 50 paths", model, t, paths=50,
              backends=("jax",))
