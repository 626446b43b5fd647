"""empirical/scan_snap/text.py: the real-text protocol (Figs. 7 and 10) runs its runs as sweep cells
: on two local worker processes, the same numbers as the runs made directly with
``train_text``. Tiny corpus on disk (cells read their corpus from a path, as spawned workers must)."""

from pathlib import Path

import numpy as np
import pytest

from empirical import textrun
from empirical.scan_snap.text import ScanSnapTextConfig, scan_snap_protocol
from helpers.text_corpus import write_toy_corpus

ROOT = Path(__file__).resolve().parents[3]
TINY = dict(vocab_size=30, emsize=16, d_hid=16, steps=6, log_every=3, eval_chunks=2)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> str:
    return write_toy_corpus(tmp_path_factory.mktemp("corpus"))


def test_scan_snap_cells_on_two_workers_match_direct_runs(corpus_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the spawned workers import the cell function
    cfg = ScanSnapTextConfig.quick(corpus=corpus_dir, layers=(1, 2), sweep_lrs=(1.0, 3.0), seeds=(1,),
                                   fig7_seeds=(1,), sweep_steps=4, **TINY)
    res = scan_snap_protocol(cfg, device="cpu", store=tmp_path / "store", workers=2)
    for L in cfg.layers:  # Fig. 7: the attention maps of each logged step
        traj, exp, _ = textrun.train_text(cfg.run(n_layer=L, optimizer="sgd", seed=1), device="cpu")
        assert sorted(res["maps"][L]) == sorted(exp.snapshots) == [0, 3, 6]
        for s, m in exp.snapshots.items():
            np.testing.assert_array_equal(res["maps"][L][s], m)
        np.testing.assert_array_equal(res["traj"][L]["entropy_layer0"].values, traj["entropy_layer0"].values)
        (run,) = res["fig7_runs"][L]  # one seed per model (fig7_seeds), its maps as 'snapshot'
        np.testing.assert_array_equal(run["snapshot"].values[-1], exp.snapshots[6])
    for row in res["sweep"].itertuples():  # Fig. 10
        run = cfg.run(n_layer=1, optimizer="sgd", lr=row.lr, ffn_lr=0.0, lr_decay=1.0, dropout=cfg.sweep_dropout,
                      seed=row.seed, steps=cfg.sweep_steps, log_every=cfg.sweep_steps)
        traj = textrun.train_text(run, device="cpu")[0]
        assert (row.entropy, row.val_loss) == (traj["entropy_layer0"].values[-1], traj["val_loss"].values[-1])
