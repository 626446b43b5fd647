"""`make bench` rows of the topic SDE (reported, never asserted): stage 1 in the full (W, b) space on the jax engine
(the model applies its structured diffusion itself, ``TopicSDE.increment``).

* the quick compare horizon (``stage1`` preset, quick: T=5, v=4, 600 steps; 147 numbers a path);
* the default config (``TopicConfig()``: T=v=10, 500 steps; 1212 numbers a path, noise of dimension
  945) — what ``tdyn simulate topic --sde`` runs without ``--set``;
* the full compare horizon (``stage1`` preset, full: T=v=10, 3000 steps) with 1000 paths.

Measured on the loaded 2-core machine (8 engineers): quick horizon 5.8 s (1.0e5 path-steps/s, goal
met); default config 62.5 s (8.0e3 path-steps/s, goal missed: the T=v=10 state has 1212 numbers and
a noise of dimension 945); the full horizon (3000 steps) extrapolates to ~375 s. Idle, after the
increment stopped forming (D, n_S) arrays per path (8.6 ms instead of 42 ms per step for 1000
paths, measured alone): quick 1.7 s, default 30.3 s (33.0 s before; 1.65e4 path-steps/s) — the
step is now bound by its 945 Gaussians per path (~25 ms per step for 1000 paths) and the engine's
draw arrays, not by the model; the full horizon (~180 s) stays far from 10 s on 2 cores."""

import pytest

from helpers.bench_sde import bench_sde
from theory.topic import TopicConfig
from theory.topic.sde import sde

pytestmark = pytest.mark.benchmark


def test_bench_topic_sde_quick_compare_horizon(bench_row, benchmark):
    model, t = sde(TopicConfig.preset("stage1", True))
    bench_sde(bench_row, benchmark, "topic SDE, full W (T=5 v=4), quick compare horizon", model, t, backends=("jax",))


def test_bench_topic_sde_default_config(bench_row, benchmark):
    model, t = sde(TopicConfig())
    bench_sde(bench_row, benchmark, "topic SDE, full W (T=v=10), default config", model, t, backends=("jax",))


def test_bench_topic_sde_full_compare_horizon(bench_row, benchmark):
    model, t = sde(TopicConfig.preset("stage1", False))
    bench_sde(bench_row, benchmark, "topic SDE, full W (T=v=10), full compare horizon", model, t, backends=("jax",))
