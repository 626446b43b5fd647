"""`make bench` rows of the topic SDE (reported, never asserted): stage 1 in the full (W, b) space on the jax engine
(the model applies its structured diffusion itself, ``TopicSDE.increment``) and on the numba path loop (the same
step compiled, ``theory.topic.sde_numba``); the full horizon on the numba loop only.

* the quick compare horizon (``stage1`` preset, quick: T=5, v=4, 600 steps; 147 numbers a path);
* the default config (``TopicConfig()``: T=v=10, 500 steps; 1212 numbers a path, noise of dimension
  945) — what ``tdyn simulate topic --sde`` runs without ``--set``;
* the full compare horizon (``stage1`` preset, full: T=v=10, 3000 steps) with 1000 paths.

Measured on the loaded 2-core machine (8 engineers): quick horizon 5.8 s (1.0e5 path-steps/s, goal
met); default config 62.5 s (8.0e3 path-steps/s, goal missed: the T=v=10 state has 1212 numbers and
a noise of dimension 945); the full horizon (3000 steps) extrapolated to ~375 s. Idle, after the
observables were read from the basis coordinates (no D x D matrix per saved state: they had been most
of the time) and the step was compiled for the numba loop (8.7 us a path-step, 945 Gaussians 2.7 us):
quick 1.2 s (jax) / 0.54 s (numba); default config 11.2 s (jax) / 3.9 s (numba; 33.0 s on jax before);
full horizon 18.0 s (numba). With the step's (D, r) x (r, r) product through BLAS (kernel 8.4 -> 6.6 us a
path-step, Gaussians 2.9 us): full horizon 18.3 -> 17.1 s, idle, same run — the 10 s goal is met at the
default horizon, not at the full one."""

import pytest

from helpers.bench_sde import bench_sde
from theory.topic import TopicConfig
from theory.topic.sde import sde

pytestmark = pytest.mark.benchmark


def test_bench_topic_sde_quick_compare_horizon(bench_row, benchmark):
    model, t = sde(TopicConfig.preset("stage1", True))
    bench_sde(bench_row, benchmark, "topic SDE, full W (T=5 v=4), quick compare horizon", model, t,
              backends=("jax", "numba"))


def test_bench_topic_sde_default_config(bench_row, benchmark):
    model, t = sde(TopicConfig())
    bench_sde(bench_row, benchmark, "topic SDE, full W (T=v=10), default config", model, t, backends=("jax", "numba"))


def test_bench_topic_sde_full_compare_horizon(bench_row, benchmark):
    model, t = sde(TopicConfig.preset("stage1", False))
    bench_sde(bench_row, benchmark, "topic SDE, full W (T=v=10), full compare horizon", model, t, backends=("numba",))
