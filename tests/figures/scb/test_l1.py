"""The SCB l1-vs-SGD figure (figures/scb/l1.py), drawn from the ``l1_beats_sgd`` claim's runs: its
files, its curves (each seed at its validation-chosen rate) and its table against the claim's own
statistic on the same runs."""

import numpy as np
import pandas as pd
import pytest

from figures.claims import registry
from figures.scb import claims as C
from figures.scb import l1 as fl1
from theory import scb

SEEDS = [0, 1, 2]


@pytest.fixture
def tiny_map(monkeypatch):
    """The claim's runs at two small map points (T = 8, batch 64, two lambdas): the claim's own
    runs function, in place of the quick map (the figure and the claim call the same one)."""
    base = registry("scb").get(fl1.CLAIM).protocol.config(scb.SCBConfig, True)
    points = []
    for lam in (1e-2, 0.1):
        coords = {"T": 8, "batch": 64, "lam": lam}
        cfg = base.replace(**coords)
        points.append((coords, cfg, C.l1_sgd_runs(cfg, seeds=SEEDS)))
    monkeypatch.setattr(C, "map_runs", lambda name, *, quick=True, device="cpu": points if name == fl1.CLAIM else [])
    return points


def test_figure_writes_png_and_the_claims_numbers(tmp_path, tiny_map):
    """Files, the lint (strict), and the table: per (lambda, method, seed) the claim's early stop."""
    from figures.core import collecting

    with collecting(strict=True):
        data = fl1.fig_l1_vs_sgd(tmp_path, True, device="cpu")
    assert (tmp_path / "l1_vs_sgd.png").stat().st_size > 1000
    csv = pd.read_csv(tmp_path / "l1_vs_sgd.csv")
    assert len(csv) == 2 * 2 * len(SEEDS)  # (lambda, method, seed)
    pd.testing.assert_frame_equal(csv[["lam", "method", "seed", "dist_P", "dist_Q"]],
                                  data["table"][["lam", "method", "seed", "dist_P", "dist_Q"]], rtol=1e-12)
    for coords, cfg, ds in tiny_map:
        rows = data["table"][data["table"].lam == coords["lam"]]
        for i, seed in enumerate(SEEDS):
            one = ds.isel(seed=i)
            stat = C.l1_vs_sgd_log_ratio(one, cfg)  # the claim's statistic on the same run
            assert rows[rows.seed == seed].log_distance_ratio.to_numpy() == pytest.approx([stat, stat])
            for method in ("l1", "sgd"):
                e = C.early_stopped(one, f"{method}_", cfg)
                r = rows[(rows.seed == seed) & (rows.method == method)].iloc[0]
                assert r.dist_P == pytest.approx(e["value_relative_distance_to_truth"])
                assert r.lr == pytest.approx(float(one[f"{method}_lr"].values[int(e["lr_index"])]))


def test_curves_are_each_seeds_validation_chosen_rate(tiny_map):
    """A curve's seed row is the distance path of the rate whose minimal population loss is lowest
    (chosen here independently, by a loop over rates)."""
    data = fl1.fig_l1_vs_sgd(None, True, device="cpu")
    coords, _, ds = tiny_map[1]
    for method, key in (("l1", coords["lam"]), ("sgd", "sgd")):
        for which, name in (("P", "value_relative_distance_to_truth"), ("Q", "attention_distance_to_truth")):
            got = data["curves"][(8, 64, key, which)]
            for i in range(len(SEEDS)):
                losses = [np.nanmin(ds[f"{method}_population_loss"].isel(seed=i).values[j])
                          for j in range(ds.sizes[f"{method}_lr"])]
                best = int(np.argmin(losses))
                np.testing.assert_allclose(got[i], ds[f"{method}_{name}"].isel(seed=i).values[best])
