"""The validity map on the tiny paper: sweep cells that resume from their store, the theory's own
check and a planted violation, `tdyn claims` (text and JSON), the Report's claims table, and the
claims outputs (map figure, table, claims.json, claims.md)."""

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import tiny.empirical.experiment as tiny_experiment
import tiny.figures.claims as tiny_claims
from tiny import ROW
from tiny.theory import TinyConfig
from figures.claims import decide_claim, planted_violation, theory_check
from figures.cli import main
from figures.context import RunContext
from helpers.tiny_row import tiny_registered
from theory import ConfigError

#: the keys the acceptance of the claims names, and the rest of a claim's JSON
KEYS = {"verdict", "interval", "seeds", "regime", "falsifier", "grade", "statement", "estimate", "statistic",
        "where_it_breaks", "map"}


@pytest.fixture
def tiny():
    with tiny_registered() as row:
        yield row


@pytest.fixture
def spec(tiny):
    return tiny_claims.claims.registry().get("gap_shrinks")


def test_batched_seeds_equal_the_trainer_per_seed():
    """The tiny paper's vectorised runs (empirical.seeds.SeedBatch) give the per-seed Trainer's numbers."""
    cfg = TinyConfig(a0=0.5, lr=8.0, steps=60)
    batched = tiny_experiment.train_seeds(cfg, seeds=[0, 3, 7])
    for i, s in enumerate([0, 3, 7]):
        one = tiny_experiment.run(cfg.replace(seed=s), device="cpu")
        np.testing.assert_allclose(batched["prob"].isel(seed=i).values, one["prob"].values, rtol=0, atol=1e-13)


def test_theory_passes_its_own_criterion_and_a_planted_violation_fails(spec):
    check = theory_check(spec)
    assert check.holds, str(check)
    assert len(check.points) == 6  # 3 learning rates inside the regime x 2 horizons
    cfg = spec.protocol.config(TinyConfig, True)
    t = cfg.ode_times()
    away = 0.62 - 0.3 * (1 - np.exp(-t / 40))  # sigma(a) drifts away from p = 0.8
    planted = xr.Dataset({"prob": ("time", away)}, coords={"time": t})
    assert planted_violation(spec, planted, horizon=200).verdict == "fails"
    rng = np.random.default_rng(0)
    noisy = [planted.assign(prob=planted["prob"] + 0.01 * rng.normal(size=t.size)) for _ in range(5)]
    assert planted_violation(spec, noisy, horizon=200).verdict == "fails"
    with pytest.raises(ConfigError, match="seeds"):
        planted_violation(spec, noisy[:3], horizon=200)


def test_map_resumes_from_its_store_without_recomputing(spec, tmp_path, monkeypatch):
    calls = []
    real = tiny_experiment.train_seeds

    def counted(config, *, seeds, device="cpu"):
        calls.append(config.lr)
        return real(config, seeds=seeds, device=device)

    monkeypatch.setattr(tiny_experiment, "train_seeds", counted)
    ctx = RunContext(device="cpu", store=tmp_path)
    first = decide_claim(spec, ctx)
    # one cell per learning rate, every seed in it; the null control (lr = 1e-6) and the robustness
    # variant (batch 64) at the three in-regime rates are cells of their own
    assert sorted(calls) == [1e-6, 0.5, 0.5, 2.0, 2.0, 8.0, 8.0, 32.0]
    calls.clear()
    again = decide_claim(spec, ctx)
    assert calls == []
    assert again.to_json() == first.to_json()
    store = tmp_path / "claims" / "tiny" / "gap_shrinks"
    cells = sorted((store / "cells").glob("*.nc"))
    assert len(cells) == 8
    cells[0].unlink()
    decide_claim(spec, ctx)
    assert len(calls) == 1
    # the decision: every in-regime point holds (6 points, 7 seeds: grade B); lr = 32 breaks it
    assert first.verdict == "holds" and first.grade == "B" and first.seeds == 7 and first.regime_points == 6
    # the null control (an untrained logit) does not pass: the criterion discriminates
    assert first.null.verdict != "holds" and first.null.discriminating
    assert abs(first.null.decision.estimate) < 1e-3  # lr = 1e-6 leaves the gap where it was
    # the paper's setting is marked on the map; the robustness variant re-decides the claim
    assert [p.coords for p in first.points if p.demo] == [{"lr": 0.5, "horizon": 200}]
    assert first.robustness[0]["name"] == "batch 64" and first.robust is (first.robustness[0]["verdict"] == "holds")
    out = {(p.coords["lr"], p.coords["horizon"]): p for p in first.points}
    assert not out[(32.0, 50)].inside and out[(32.0, 50)].verdict == "fails"
    assert first.interval[1] < 0 and "fails outside the regime at lr=32" in first.where_it_breaks
    # Holm's first step over the 6 in-regime points
    assert first.point_level == pytest.approx(1 - 0.05 / 6)
    assert min(p.decision.fail_level for p in first.points if p.inside) == pytest.approx(0.05 / 6)


def test_cells_run_the_train_slot_per_seed_without_a_runs_function(tiny, tmp_path):
    """Without ``runs`` a cell trains each seed through the row's train slot: same statistic as
    the batched runs (which equal the Trainer's numbers)."""
    from figures.claims.registry import load_registry

    text = Path(tiny_claims.claims.registry().path).read_text()
    text = text.replace('runs = "tiny.empirical.experiment:train_seeds"\n', "").replace("quick = [0.5, 2.0, 8.0, 32.0]",
                                                                           "quick = [8.0, 32.0]")
    (tmp_path / "claims.toml").write_text(text)
    plain = load_registry(tmp_path / "claims.toml", paper="tiny", config=TinyConfig).claims[0]
    assert plain.runs == ""
    ctx = RunContext(device="cpu", store=tmp_path / "store")
    a = decide_claim(plain, ctx)
    b = decide_claim(tiny_claims.claims.registry().get("gap_shrinks"), ctx)
    vb = {tuple(p.coords.values()): p.values for p in b.points}
    for p in a.points:  # outside the regime (lr = 32) the discrete map is chaotic: rounding grows to O(1)
        if p.inside:
            np.testing.assert_allclose(p.values, vb[tuple(p.coords.values())], rtol=0, atol=1e-10)
    assert sum(p.inside for p in a.points) == 3  # lr = 8 at two horizons, and the paper's setting lr = 0.5


def test_tdyn_claims_on_the_tiny_paper(tiny, tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["claims", "tiny", "--json", "--store", str(tmp_path), "--no-progress", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert len(doc) == 1 and KEYS <= set(doc[0])
    c = doc[0]
    assert c["verdict"] in ("holds", "fails", "inconclusive", "untested") and c["seeds"] >= 5 and c["grade"] in "ABC"
    assert {"test", "family_level", "mde", "can_fire", "null", "theory_check", "practice", "demo"} <= set(c)
    assert len(c["interval"]) == 2 and c["interval"][0] <= c["estimate"] <= c["interval"][1]
    assert c["regime"][0]["quantity"] == "lr_curvature" and c["falsifier"]
    assert len(list((tmp_path / "claims" / "tiny" / "gap_shrinks" / "cells").glob("*.nc"))) == 8  # --store: its cells
    assert len(c["map"]["points"]) == 8 and {"coords", "inside", "verdict", "values"} <= set(c["map"]["points"][0])
    # the text: a few lines per claim, no evidence dump; the cells come from the store
    res = runner.invoke(main, ["claims", "tiny", "--store", str(tmp_path), "--no-progress", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert max(map(len, lines)) <= 120  # long lines wrapped (continuations indented two more)
    name = [ln for ln in lines if ln.startswith("  gap_shrinks")]
    assert len(name) == 1 and "HOLDS" in name[0] and "grade B" in name[0], res.output
    assert len([ln for ln in lines if ln.startswith("    ") and not ln.startswith("      ")]) == 6  # a claim: 7 lines
    flat = " ".join(res.output.split())  # the text as read, across wrapped lines
    assert "test: exact sign test" in flat and "null (an untrained logit" in flat
    assert "theory (exact flow): holds" in flat
    assert "regime: lr p (1 - p) in [0, 2]" in flat and "breaks: fails outside the regime" in flat
    assert "values" not in res.output


def test_tdyn_claims_errors_and_papers_without_claims(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["claims", "nope"])
    assert res.exit_code == 2 and res.output.startswith("error: paper:")
    res = runner.invoke(main, ["claims", "scb", "--workers", "0"])
    assert res.exit_code == 2 and "error: workers:" in res.output
    with tiny_registered(claims=None, missing={**ROW["missing"], "claims": "a paper that makes no claims"}):
        res = runner.invoke(main, ["claims", "tiny", "--json", "--no-progress"])
    assert res.exit_code == 0 and json.loads(res.stdout) == []
    assert "note: tiny has no claims: a paper that makes no claims" in res.stderr


def test_report_prints_the_claims_table(spec, tmp_path):
    from figures.report import REPORT_KEYS, Claim, Observable, Report

    result = decide_claim(spec, RunContext(device="cpu", store=tmp_path))
    old = Claim("single_run", "an older claim", False, {"nested": {"a": [1, 2, 3]}}, "one run")
    rep = Report("tiny", "regime", [Observable("prob", 0.01, 0.05)], [result, old])
    text = rep.table()
    assert "gap_shrinks" in text and "HOLDS" in text and "nested" not in text
    assert "agreement_passed (observables only): True" in text
    doc = rep.to_json()
    assert tuple(doc) == REPORT_KEYS and doc["agreement_passed"] is True
    assert KEYS <= set(doc["claims"][0]) and doc["claims"][1]["evidence"] == {"nested": {"a": [1, 2, 3]}}


def test_claim_lines_wrap_long_text_without_cutting_words(spec, tmp_path):
    from figures.claims.report import claim_lines

    doc = decide_claim(spec, RunContext(device="cpu", store=tmp_path)).to_json()
    statement = " ".join(f"word{i}" for i in range(60))  # 60 words, ~410 characters
    doc["statement"] = statement
    if doc.get("null"):
        doc["null"]["description"] = "a long null control description " * 4
    lines = claim_lines(doc)
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    text = " ".join(" ".join(lines).split())
    assert statement in text and "…" not in text  # every word, whole
    if doc.get("null"):
        assert " ".join(doc["null"]["description"].split()) in text


def test_figures_write_the_maps_and_claims_md(tmp_path):
    """A converted row (figures = a tuple of figure functions) gets its claims' maps, tables and
    claims.json from the collector; claims.md links the map figures by relative path."""
    from figures.claims.report import read_claims, write_claims_md
    from figures.make import make_figures
    from figures.papers import PAPERS

    out_root = tmp_path / "out"
    with tiny_registered(figures=()):
        written = make_figures("tiny", out_root / "tiny", RunContext(device="cpu", store=tmp_path / "store"))
        decided = read_claims(out_root, [PAPERS["tiny"], PAPERS["scb"]])
    with tiny_registered(claims=None, missing={**ROW["missing"], "claims": "a paper that makes no claims"}) as bare:
        assert read_claims(out_root, [bare]) == {"tiny": "a paper that makes no claims"}
    names = {p.relative_to(out_root / "tiny").as_posix() for p in written}
    assert {"claims/gap_shrinks.png", "claims/gap_shrinks.csv", "claims/claims.json", "report.json"} <= names
    assert decided["tiny"][0]["verdict"] == "holds" and decided["scb"].startswith("not decided yet")
    md = write_claims_md(decided, out_root / "claims.md").read_text()
    link = md[md.index("](tiny/claims/gap_shrinks.png") + 2: md.index(".png)") + 4]
    assert (out_root / link).is_file()
    assert "| tiny | [gap_shrinks](#tiny-gap_shrinks) | **holds** |" in md


def test_the_claims_store_goes_under_the_outdir_not_the_package(tmp_path, monkeypatch):
    """Without a store root the claims' cells go to <outdir>/claims/store/<claim> (the context's
    outdir, which make_figures sets): never into the working directory's figures/out or a package."""
    from figures.make import make_figures

    monkeypatch.chdir(tmp_path)
    with tiny_registered(figures=()):
        make_figures("tiny", tmp_path / "out", RunContext(device="cpu", progress=False))
    assert len(list((tmp_path / "out" / "claims" / "store" / "gap_shrinks" / "cells").glob("*.nc"))) == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_reproduce_ends_with_the_claims_summary_and_claims_md(tmp_path, monkeypatch):
    import figures.cli
    import figures.context

    monkeypatch.setattr(figures.context, "OUT_DIR", tmp_path / "out")
    with tiny_registered(figures=()) as row:
        monkeypatch.setattr(figures.cli, "PAPERS", {"tiny": row})
        res = CliRunner().invoke(main, ["reproduce", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    tail = res.output.strip().splitlines()[-4:]
    assert tail[0].startswith("claims of every paper") and "gap_shrinks" in tail[1] and "HOLDS" in tail[1]
    assert tail[2] == "  tally: 1 claims: 1 hold, 0 fail, 0 inconclusive, 0 untested"
    assert tail[3] == f"wrote {tmp_path / 'out' / 'claims.md'}"
    assert (tmp_path / "out" / "tiny" / "claims" / "store" / "gap_shrinks" / "index.csv").is_file()  # default store


def test_full_map_reaches_grade_a(tiny, tmp_path):
    res = CliRunner().invoke(main, ["claims", "tiny", "--full", "--json", "--store", str(tmp_path), "--no-progress",
                                    "--device", "cpu"])
    assert res.exit_code == 0, res.output
    c = json.loads(res.output)[0]
    # 12 seeds; lr in {0.25, ..., 8} x 3 horizons inside the regime, lr in {16, 32, 64} outside
    assert (c["mode"], c["seeds"], c["regime_points"], c["grade"]) == ("full", 12, 18, "A")
    assert sum(not p["inside"] for p in c["map"]["points"]) == 9


@pytest.mark.parametrize("direction", ["below", "inside"])
def test_a_three_axis_map_is_laid_out_for_a_page_and_passes_the_lint(direction):
    """A heat map with four panels (the third axis) wraps to at most three per row, and its title
    names the claim and the statistic in words: the strict lint of figures.style accepts it (it
    refused the one-row layout and the snake_case names)."""
    import matplotlib

    matplotlib.use("Agg")
    from figures.claims.report import fig_claim_map
    from figures.core import collecting

    axes = [{"name": "lr", "label": "learning rate $\\eta$", "scale": "log"},
            {"name": "batch", "label": "batch size $B$", "scale": "log"},
            {"name": "horizon", "label": "horizon $t$", "scale": "linear"}]
    points = []
    for h in (1, 2, 3, 4):
        for lr in (0.1, 1.0):
            for b in (8, 64):
                est = lr * h / b
                points.append({"coords": {"lr": lr, "batch": b, "horizon": h}, "inside": lr < 1, "seeds": 5,
                               "estimate": est, "interval": [est - 0.01, est + 0.01],
                               "verdict": "holds" if est < 0.05 else "fails", "theory": [est],
                               "theory_verdict": "holds", "note": None, "violated": []})
    doc = {"name": "gap_shrinks_fast", "verdict": "holds", "grade": "B", "seeds": 5,
           "statistic": {"name": "final_gap", "symbol": "$g(T)$"},
           "criterion": {"holds_when": "< 0.05", "boundary": 0.05 if direction == "below" else [0.0, 0.05],
                         "direction": direction},
           "map": {"axes": axes, "points": points}}
    with collecting(strict=True) as written:
        out = fig_claim_map(doc, None)
    assert not written.problems and len(out["rows"]) == 16
    # one axis: a line map with every verdict, a theory line and points outside the regime
    line = {**doc, "map": {"axes": axes[:1], "points": [
        {**p, "coords": {"lr": p["coords"]["lr"] * (1 + i)}, "verdict": ("holds", "fails", "inconclusive")[i % 3]}
        for i, p in enumerate(points[:6])]}}
    with collecting(strict=True) as written:
        fig_claim_map(line, None)
    assert not written.problems


def test_a_window_claims_map_is_scaled_to_the_window_and_titled_by_its_statement():
    """Every value inside the window 0.75-0.85 (0.806-0.815): the colour scale spans the window
    widened by a quarter of its width (not the values' 1% spread), both ends are marked on the
    colourbar, the title is the claim's statement in words (identifiers as math), and each cell's
    number is black or white, whichever reads on its colour; four panels make a 2 x 2 grid."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from figures import style
    from figures.claims.report import _heat_map

    axes = [{"name": "eta_A", "label": "$\\eta_A$", "scale": "log"},
            {"name": "batch", "label": "batch size $B$", "scale": "log"},
            {"name": "T", "label": "context length $T$", "scale": "log"}]
    points = [{"coords": {"eta_A": lr, "batch": 32, "T": T}, "inside": lr < 0.4, "seeds": 8,
               "estimate": 0.806 + 0.003 * i + 0.0001 * k, "interval": [0.8, 0.82], "verdict": "holds", "theory": [],
               "theory_verdict": None, "note": None, "violated": [], "demo": ""}
              for k, T in enumerate((8, 16, 32, 64)) for i, lr in enumerate((0.1, 0.2, 0.4))]
    doc = {"name": "sde_band_coverage", "verdict": "holds", "grade": "B", "seeds": 8,
           "statement": "The SDE with drift eta_A g predicts the seed spread of real SGD: its band holds 80%.",
           "statistic": {"name": "band_coverage", "symbol": "$\\mathrm{cov}_{80}$", "unit": ""},
           "criterion": {"holds_when": "in [0.75, 0.85]", "boundary": [0.75, 0.85], "direction": "inside"},
           "map": {"axes": axes, "points": points}}
    from figures.claims.report import map_table

    fig = _heat_map(plt, doc, axes, map_table(doc))
    assert style.lint(fig) == []
    title = fig._suptitle.get_text()
    assert title.startswith("The SDE with drift $\\eta_{A}$ g predicts the seed spread of real SGD")
    assert "sde" not in title
    cbar = next(a for a in fig.axes if hasattr(a, "_colorbar"))
    norm = cbar._colorbar.norm
    assert (norm.vmin, norm.vmax) == pytest.approx((0.725, 0.875))
    marks = sorted({round(float(ln.get_ydata()[0]), 6) for ln in cbar.get_lines()})
    assert marks == [0.75, 0.85]
    assert "band coverage" in cbar.get_ylabel() and "window" in cbar.get_ylabel()
    panels = [a for a in fig.axes if not hasattr(a, "_colorbar")]
    assert len(panels) == 4 and len({round(a.get_position().y0, 2) for a in panels}) == 2
    for ax in panels:
        im = ax.images[0]
        for t in ax.texts:
            assert style.contrast(t.get_color(), im.to_rgba(float(t.get_text().split()[-1]))) >= 4.5
    plt.close(fig)
