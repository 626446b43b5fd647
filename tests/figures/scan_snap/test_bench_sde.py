"""`make bench` row of Scan & Snap's count-vector SDE (theory/scan_snap/sde.py): 1000 paths over the
compare horizon (the theory preset: 100 optimiser steps, T = 4096, batch 1024; one Euler–Maruyama
step per optimiser step), warm, jax engine (the model has no numba increment), goal <= 10 s on 2 cores."""

import pytest

from helpers.bench_sde import bench_sde
from theory import scan_snap as ss
from theory.scan_snap.sde import count_sde

pytestmark = pytest.mark.benchmark


def test_bench_scan_snap_count_sde(bench_row, benchmark):
    cfg = ss.Config.preset("theory", quick=True)
    model = count_sde(cfg)
    bench_sde(bench_row, benchmark, "scan-snap count-vector SDE (theory preset)", model, cfg.ode_times(),
              backends=("jax",))
