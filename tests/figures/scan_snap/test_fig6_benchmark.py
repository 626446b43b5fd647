"""Speed of the Fig. 6 protocol through the sweep runner on the count engine against the torch grid
(pytest-benchmark; `make bench`), measured in the same run; the asserted part is
the agreement of the two tables within seed noise."""

import pytest
import torch

from empirical import scan_snap as es
from helpers.threads import one_blas_thread, one_torch_thread  # noqa: F401  (fixtures)


@pytest.mark.benchmark
def test_fig6_protocol_new_vs_old(bench_row, benchmark, one_blas_thread, tmp_path):
    """The Fig. 6 protocol (docs/papers/scan_snap.md §5.4: 4 panels x 4 eta_Z x 4 ratios, 100 steps,
    float64) at 2 seeds instead of 10 (the full one takes minutes on the old path): new = the sweep
    runner's cells on the count-vector engine (:mod:`figures.scan_snap.fig6`, one process, fresh
    store), old = the torch grid per panel as before (:func:`empirical.scan_snap.experiment.train_grid`, float64,
    one thread). Both single-threaded, measured in this run. Asserted: both tables show the
    protocol's grid with 2 runs per cell and their DT entropies agree within seed noise (5 standard
    errors of the difference, per cell, or 0.1 nats)."""
    import time

    import numpy as np
    import pandas as pd

    from figures.scan_snap.fig6 import FIG6_GRID, fig6_config, fig6_table

    seeds = 2
    t0 = time.perf_counter()
    old = []
    for nl in FIG6_GRID["num_last"]:
        cfg = fig6_config(nl, 0.5).replace(seed=nl)
        res = es.train_grid(cfg, list(FIG6_GRID["eta_Z"]), list(FIG6_GRID["ratio"]), seeds, device="cpu",
                            dtype=torch.float64)
        df = pd.DataFrame({"eta_Z": res["eta_Z"], "ratio": res["ratio"], "entropy": res["final"]["dt_entropy"]})
        g = df.groupby(["eta_Z", "ratio"])["entropy"].agg(["mean", "std", "count"]).reset_index()
        g.insert(0, "num_last", nl)
        old.append(g)
    t_old = time.perf_counter() - t0
    old = pd.concat(old, ignore_index=True)
    new = benchmark.pedantic(lambda: fig6_table(seeds=seeds, store=tmp_path / f"s{time.monotonic_ns()}"),
                             rounds=1, iterations=1)
    t_new = benchmark.stats.stats.min
    ratio = t_old / t_new
    print(f"Fig. 6 at {seeds} seeds: old {t_old:.1f} s, new {t_new:.1f} s, ratio {ratio:.2f}")
    bench_row(f"Fig. 6 protocol at {seeds}/10 seeds: new vs old", ratio, "x", goal=">= 2x", met=ratio >= 2,
              seconds=t_new, baseline_seconds=t_old, seeds=seeds)
    m = new.merge(old, on=["num_last", "eta_Z", "ratio"], suffixes=("", "_old"))
    assert len(m) == 64 and set(m["count"]) == set(m["count_old"]) == {seeds}
    se = np.sqrt((m["std"] ** 2 + m["std_old"] ** 2) / seeds)
    assert np.all(np.abs(m["mean"] - m["mean_old"]) <= np.maximum(5 * se, 0.1))
