"""`make bench` rows: what cutting time into segments costs the jax SDE engine (reported, never
asserted). The engine runs each chunk's horizon as one compiled call per segment of about
:data:`simulate._em.SEGMENT_PATH_STEPS` path-steps, so that Ctrl-C or SIGTERM stops a solve within
about a second; the baseline, in the same run, is the whole horizon as one compiled call per chunk
(``segment`` larger than the grid). Both give the same numbers (tests/simulate/test_em.py); the
row's ``value`` is the segmented time and ``ratio`` segmented / one call (1 = free)."""

import timeit

import numpy as np
import pytest

from simulate._em import em_paths, segment_plan, step_plan

pytestmark = pytest.mark.benchmark


def _row(bench_row, benchmark, label, model, t, paths=1000):
    t = np.asarray(t, float)
    dt = float(getattr(model, "dt", 1.0))
    y0 = np.asarray(model.initial_state(), float)
    steps = int(step_plan(t, dt)[0].sum())
    times = {}
    for name, seg in (("one call", 10**9), ("segmented", None)):
        def run(seed=1, seg=seg):
            em_paths(model, t, dt, seed, paths, y0, segment=seg)

        run(seed=0)  # compile
        if seg is None:
            benchmark.pedantic(run, rounds=3, iterations=1)
            times[name] = float(benchmark.stats.stats.min)
        else:
            times[name] = min(timeit.repeat(run, number=1, repeat=3))
    n = step_plan(t, dt)[0]
    bench_row(f"{label}: segmented / one call", times["segmented"], "s", baseline=times["one call"],
              ratio=times["segmented"] / times["one call"], paths=paths, steps=steps,
              intervals_per_segment=segment_plan(n, -(-paths // 2), 1), intervals=int(n.size))
    print(f"\n{label}: {paths} paths x {steps} steps: one call {times['one call']:.3f} s, segmented "
          f"{times['segmented']:.3f} s (ratio {times['segmented'] / times['one call']:.3f})")


def test_bench_segment_cost_scb_reduced_sde(bench_row, benchmark):
    from theory import scb

    model, t = scb.minibatch_sde_reduced(scb.SCBConfig.preset("compare", quick=True))
    _row(bench_row, benchmark, "scb reduced SDE, compare horizon", model, t)


def test_bench_segment_cost_topic_sde(bench_row, benchmark):
    from theory.topic import TopicConfig
    from theory.topic.sde import sde

    model, t = sde(TopicConfig.preset("stage1", True))
    _row(bench_row, benchmark, "topic SDE (T=5 v=4), quick compare horizon", model, t)
