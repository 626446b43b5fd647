"""figures/sweep.py (``tdyn sweep``): a paper's grid through the sweep runner equals the train slot
run directly; the cell's job and the variant (the config's own where the Config has one)."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from figures.cli import main
from figures.papers import PAPERS
from figures.sweep import JOBS, plan, sweep
from theory.errors import ConfigError


def test_sweep_scb_through_the_cli_matches_the_train_slot(tmp_path):
    """`tdyn sweep scb` over eta_V x 2 seeds; rerun with one more value only runs the new cells; the
    stored trajectory equals running the train slot directly with that cell's config."""
    store = tmp_path / "st"
    args = ["sweep", "scb", "--grid", "eta_V=0.02,0.05", "--seeds", "2", "--set", "T=8", "--set", "steps=10",
            "--set", "batch=16", "--set", "log_every=5", "--store", str(store)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert res.stdout.strip().endswith(f"4/4 cells done in {store / 'index.csv'}")
    # each cell by its parameter values, not its hash
    done = sorted(ln for ln in res.stdout.splitlines() if ln.endswith(": ok"))
    assert done == sorted(f"eta_V={v}, seed={k}: ok" for v in (0.02, 0.05) for k in (0, 1)), res.stdout
    seen = []
    ds = sweep("scb", ["eta_V=0.02,0.05,0.1"], seeds=2, overrides=["T=8", "steps=10", "batch=16", "log_every=5"],
               store=store, progress=lambda *a: seen.append(a))
    assert len(seen) == 2 and ds.sizes["cell"] == 6
    cell = ds.where((ds["eta_V"] == 0.05) & (ds["seed"] == 1), drop=True).isel(cell=0)
    row = PAPERS["scb"]
    direct = row.slot("train")(row.make_config(["T=8", "steps=10", "batch=16", "log_every=5", "eta_V=0.05", "seed=1"]),
                               device="cpu")
    for v in ("value_transition_correlation", "population_loss"):
        np.testing.assert_array_equal(cell[v].values, direct[v].values)
    bad = CliRunner().invoke(main, ["sweep", "scb", "--grid", "eta_V=0.1,-1", "--store", str(tmp_path / "no")])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: eta_V:") and not (tmp_path / "no").exists()


def test_plan_binds_the_variant_into_the_config_where_the_config_owns_it():
    cells = plan("joma", ["lr=0.1,0.2"], variant="mixture", overrides=["steps=5"])
    assert [c.config["variant"] for c in cells] == ["mixture", "mixture"] and {c.job for c in cells} == {"train"}
    assert all("variant" not in c.options for c in cells)  # one mechanism: the config carries it
    assert [c.config["lr"] for c in cells] == [0.1, 0.2] and {c.config["steps"] for c in cells} == {5}
    legacy = plan("scb", ["eta_V=0.02"], variant="sgd")  # a Config without a variant field (until it has one)
    if not PAPERS["scb"].config_has_variant:
        assert legacy[0].options["variant"] == "sgd"
    with pytest.raises(ConfigError, match="^variant: "):
        plan("joma", ["lr=0.1"], variant="nope")
    with pytest.raises(ConfigError, match="^kind: "):  # named after the CLI flag --kind
        plan("joma", ["lr=0.1"], job="nope")
    assert set(JOBS) == {"train", "ode", "text"}


def test_a_corpus_is_refused_where_no_real_text_run_reads_it(tmp_path):
    """``--corpus`` only feeds ``--kind text``: with train/ode cells it would be ignored, so it is
    refused (library: ConfigError('corpus'); CLI: one line, exit 2, nothing written)."""
    from empirical.text import TRAIN_FILE, VALID_FILE

    for job in ("train", "ode"):
        with pytest.raises(ConfigError) as err:
            plan("scb", {"N": [3, 4]}, job=job, corpus=str(tmp_path))
        assert err.value.field == "corpus"
    corpus = tmp_path / "wt"
    corpus.mkdir()
    for name in (TRAIN_FILE, VALID_FILE):
        (corpus / name).write_text(" the cat sat on the mat \n" * 20)
    res = CliRunner().invoke(main, ["sweep", "scb", "--grid", "N=3,4", "--corpus", str(corpus),
                                    "--store", str(tmp_path / "S"), "--no-progress"])
    assert res.exit_code == 2 and res.stderr == ("error: corpus: only the real-text runs read a corpus "
                                                 "(--kind text), not --kind train\n"), res.output
    assert not (tmp_path / "S").exists()
