"""The `make bench` row of an SDE model (imported as ``helpers.bench_sde``): the goal "1000
paths over the compare horizon in <= 10 s on 2 cores", per engine, warm (compiled once first).

    bench_sde(bench_row, benchmark, "scb reduced SDE", model, t)   # a paper's bench row

Rows: ``value`` the warm wall time (s) of ``paths`` paths on ``t`` (``config.ode_times()``),
``path_steps_per_s`` (paths x Euler–Maruyama steps per second), and for every engine after the
first its speed-up over the first (``baseline``: the first engine's time in the same run)."""

from __future__ import annotations

import timeit

import numpy as np

import simulate
from theory.noise import step_plan

GOAL = "<= 10 s: 1000 paths over the compare horizon, 2 cores"


def bench_sde(bench_row, benchmark, label: str, model, t, *, paths: int = 1000, dt: float | None = None,
              backends=("jax", "numba"), goal_s: float = 10.0) -> dict[str, float]:
    dt = float(dt if dt is not None else getattr(model, "dt", 1.0))
    steps = int(step_plan(np.asarray(t, float), dt)[0].sum())
    times: dict[str, float] = {}
    for i, backend in enumerate(backends):
        def run(seed=1, backend=backend):
            simulate.solve_sde(model, t, paths=paths, seed=seed, dt=dt, backend=backend)

        run(seed=0)  # compile
        if i == 0:
            benchmark.pedantic(run, rounds=3, iterations=1)
            times[backend] = float(benchmark.stats.stats.min)
        else:
            times[backend] = min(timeit.repeat(run, number=1, repeat=3))
        first = times[backends[0]]
        bench_row(f"{label} [{backend}]", times[backend], "s", baseline=None if i == 0 else first,
                  goal=GOAL, met=times[backend] <= goal_s, paths=paths, steps=steps,
                  path_steps_per_s=paths * steps / times[backend],
                  **({} if i == 0 else {"speedup_over_" + backends[0]: first / times[backend]}))
        print(f"\n{label} [{backend}]: {paths} paths x {steps} steps in {times[backend]:.3f} s "
              f"({paths * steps / times[backend]:.3g} path-steps/s)")
    return times
