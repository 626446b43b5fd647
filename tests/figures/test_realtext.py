"""figures/realtext.py and the real-text protocols run as sweep cells (JoMA Figs. 6/8 here; Scan &
Snap's in tests/empirical/scan_snap/test_text.py): the same numbers as the runs made
directly with ``train_text``, a store that makes a rerun compute nothing and an interrupted protocol
resume, a failing run recorded while the others finish, and local worker processes giving the
in-process numbers. Tiny corpus on disk (cells read their corpus from a path, as spawned workers must)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from empirical import textrun
from empirical.joma import text as JT
from empirical.sweeps import CellsFailed, open_sweep, read_index
from figures.context import RunContext
from figures import realtext as FR
from figures.joma import text as FJ
from figures.cli import main
from helpers.text_corpus import write_toy_corpus

TINY = dict(vocab_size=30, emsize=16, d_hid=16, steps=6, log_every=3, eval_chunks=2)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> str:
    """A toy language with bigram structure, written as a WikiText directory."""
    return write_toy_corpus(tmp_path_factory.mktemp("corpus"))


def _joma(corpus_dir):
    # lr = the first sweep lr: the depth-2 run doubles as the sweep's run at that lr (as Fig. 6/8 at 1e-4)
    return JT.JomaTextConfig.quick(corpus=corpus_dir, layers=(1, 2), sweep_layers=2, lr=1e-3, sweep_lrs=(1e-3, 3e-3),
                                  seeds=(1, 2), **TINY)


@pytest.fixture
def count_runs(monkeypatch):
    """Counts the training runs made in this process (the cell function's calls of train_text);
    ``fail(pred)`` makes runs whose config satisfies ``pred`` raise (``interrupt=True``: Ctrl-C)."""
    calls, faults = [], []
    original = textrun.train_text

    def counted(config, **kw):
        for pred, exc in faults:
            if pred(config):
                raise exc
        calls.append(config)
        return original(config, **kw)

    monkeypatch.setattr(textrun, "train_text", counted)
    counted.calls, counted.faults = calls, faults
    return counted


def _direct_joma(cfg):
    """The protocol re-done by hand: every (layers, lr, seed) run with train_text, seed means."""
    def mean(L, lr):
        runs = [textrun.train_text(cfg.run(n_layer=L, lr=lr, seed=s), device="cpu")[0] for s in cfg.seeds]
        return {v: np.mean([r[v].values for r in runs], axis=0) for v in runs[0].data_vars if v != "minibatch_loss"}

    return {"depth": {L: mean(L, cfg.lr) for L in cfg.layers},
            "sweep": {lr: mean(cfg.sweep_layers, lr) for lr in cfg.sweep_lrs}}


def _assert_same(res, ref):
    for part in ("depth", "sweep"):
        assert list(res[part]) == list(ref[part])
        for k, traj in res[part].items():
            for v, want in ref[part][k].items():
                np.testing.assert_array_equal(traj[v].values, want, err_msg=f"{part} {k} {v}")


def _claims(cfg, res):
    """The per-seed statistics the real-text claims decide on (figures.joma.text.curve_rebound)."""
    return [FJ.curve_rebound(t, name=f"entropy_layer{layer}") for key, runs in sorted(res["runs"].items())
            for t in runs for layer in range(sum(v.startswith("entropy_layer") for v in t.data_vars))]


def test_joma_cells_match_direct_runs_rerun_computes_nothing_and_resume(corpus_dir, tmp_path, count_runs):
    cfg, store = _joma(corpus_dir), tmp_path / "store"
    ref = _direct_joma(cfg)
    count_runs.calls.clear()
    # interrupted after two runs (Ctrl-C in the third): the two finished runs are kept
    count_runs.faults.append((lambda c: len(count_runs.calls) == 2, KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        JT.joma_protocol(cfg, device="cpu", store=store)
    assert len(list((store / "cells").iterdir())) == 2
    count_runs.faults.clear()
    res = JT.joma_protocol(cfg, device="cpu", store=store)
    assert len(count_runs.calls) == 2 + 4  # 3 (layers, lr) pairs x 2 seeds; the resume ran the other 4
    _assert_same(res, ref)
    ref_summary = FJ.summaries(res)
    # a rerun computes nothing and gives identical results, summaries and claims
    again = JT.joma_protocol(cfg, device="cpu", store=store)
    assert len(count_runs.calls) == 6
    _assert_same(again, ref)
    assert again["seconds"] == res["seconds"]  # the runs' own training times, kept in the store
    assert FJ.summaries(again).equals(ref_summary)
    assert _claims(cfg, again) == _claims(cfg, res)
    idx = read_index(store)
    assert len(idx) == 6 and set(idx["status"]) == {"ok"}
    assert sorted(zip(idx["n_layer"], idx["lr"], idx["seed"])) == sorted(
        (L, lr, s) for L, lr in [(1, 1e-3), (2, 1e-3), (2, 3e-3)] for s in (1, 2))


def test_failing_run_is_recorded_and_the_others_finish(corpus_dir, tmp_path, count_runs):
    cfg, store = _joma(corpus_dir), tmp_path / "store"
    count_runs.faults.append((lambda c: c.n_layer == 2 and c.lr == 3e-3 and c.seed == 2, RuntimeError("boom")))
    with pytest.raises(CellsFailed) as info:
        JT.joma_protocol(cfg, device="cpu", store=store)
    assert info.value.one_line().startswith("sweep: 1 of 6 cell(s) failed (first: RuntimeError: boom)")
    idx = read_index(store).set_index(["n_layer", "lr", "seed"])
    assert idx.loc[(2, 3e-3, 2), "status"] == "failed" and "boom" in idx.loc[(2, 3e-3, 2), "error"]
    assert (idx["status"] == "ok").sum() == 5 and len(list((store / "cells").iterdir())) == 5
    count_runs.faults.clear()
    n = len(count_runs.calls)
    JT.joma_protocol(cfg, device="cpu", store=store)
    assert len(count_runs.calls) == n + 1  # only the failed cell is retried


def test_figures_use_the_cli_store_per_paper(corpus_dir, tmp_path, monkeypatch, count_runs):
    monkeypatch.setattr(FR, "_CACHE", {})
    monkeypatch.setattr(FR, "config_for", lambda paper, quick, corpus=None: _joma(corpus_dir))
    df = FJ.fig_joma_lr_sweep(None, True, device="cpu", ctx=RunContext(corpus=corpus_dir, store=tmp_path / "runs"))
    assert len(list((tmp_path / "runs" / "joma" / "cells").glob("*.nc"))) == 6 == len(count_runs.calls)
    assert sorted(df["lr"].unique()) == [1e-3, 3e-3]
    FR._CACHE.clear()  # a fresh process: the default store is <outdir>/wikitext_runs
    FJ.fig_joma_entropy(tmp_path / "out", True, device="cpu", ctx=RunContext(corpus=corpus_dir))
    assert len(list((tmp_path / "out" / FR.RUNS_DIR / "cells").glob("*.nc"))) == 6


@pytest.mark.parametrize("args, field", [(["--workers", "0"], "workers"), (["--store", "FILE"], "store")])
def test_cli_bad_sweep_options_one_line_exit_2(args, field, corpus_dir, tmp_path):
    (tmp_path / "f").write_text("not a folder")
    args = [str(tmp_path / "f") if a == "FILE" else a for a in args]
    res = CliRunner().invoke(main, ["figures", "joma", "--corpus", corpus_dir, *args])
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), res.stderr


def test_text_cell_is_the_train_text_run(corpus_dir):
    cfg = textrun.TextRunConfig(corpus=corpus_dir, n_layer=2, **TINY)
    ds = textrun.text_cell("joma", cfg.to_dict())
    traj, exp, _ = textrun.train_text(cfg, device="cpu")
    for v in traj.data_vars:
        np.testing.assert_array_equal(ds[v].values, traj[v].values, err_msg=v)
    np.testing.assert_array_equal(ds["snapshot"].values, np.stack([exp.snapshots[s] for s in (0, 3, 6)]))


def test_cli_sweep_kind_text_is_the_fig8_run_and_reruns_compute_nothing(corpus_dir, tmp_path):
    store = tmp_path / "store"
    sets = [a for kv in TINY.items() for a in ("--set", "%s=%s" % kv)]
    args = ["sweep", "joma", "--kind", "text", "--corpus", corpus_dir, "--grid", "lr=1e-3,3e-3", "--seeds", "2",
            "--store", str(store), *sets]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert len([ln for ln in res.stdout.splitlines() if " ok" in ln]) == 4  # one line per computed cell
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and " ok" not in again.stdout and "4/4 cells done" in again.stdout
    ds = open_sweep(store)
    cfg = _joma(corpus_dir)  # the Fig. 8 run: sweep_layers layers, Adam, the protocol's settings
    for i in range(ds.sizes["cell"]):
        lr, seed = float(ds["lr"][i]), int(ds["seed"][i])
        traj = textrun.train_text(cfg.run(n_layer=5, lr=lr, seed=seed), device="cpu")[0]
        np.testing.assert_array_equal(ds["entropy_layer4"].values[i], traj["entropy_layer4"].values)


@pytest.mark.parametrize("args, field", [(["joma", "--grid", "lr=-1"], "lr"), (["scb", "--grid", "lr=1"], "kind")])
def test_cli_sweep_kind_text_bad_values(args, field, corpus_dir, tmp_path):
    res = CliRunner().invoke(main, ["sweep", *args, "--kind", "text", "--corpus", corpus_dir, "--store", str(tmp_path)])
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), res.stderr
