"""figures.topic.figures: FIGURES is the row's figures slot; the collector writes every figure,
table and report.json; compare never imports the figures module."""

from __future__ import annotations

import pytest

import ast
import inspect
import json
from pathlib import Path

import figures.topic.figures as F
from figures.make import make_figures
from figures.papers import get
from figures.realtext import corpus_available

PACKAGE = Path(F.__file__).parent


def test_figures_slot_is_the_tuple_of_figure_functions():
    assert get("topic").slot("figures") is F.FIGURES
    for fig in F.FIGURES:
        params = inspect.signature(fig).parameters
        assert list(params)[:2] == ["outdir", "quick"] and params["device"].kind is inspect.Parameter.KEYWORD_ONLY


def test_compare_and_claims_never_import_the_figures_module():
    for name in ("compare.py", "claims.py"):
        tree = ast.parse((PACKAGE / name).read_text())
        imported = {(n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "figures" not in imported and "figures.topic.figures" not in imported, name


@pytest.mark.slow  # decides every quick topic claim (~2.5 CPU-min); make figures runs the same path
def test_the_collector_writes_every_output_and_the_report(tmp_path):
    """`tdyn figures topic --quick`: every file recorded in the order written, report.json last and
    equal to the compare report (the runs are shared: cached per process)."""
    written = make_figures("topic", tmp_path, quick=True, device="cpu")
    names = [p.name for p in written]
    text = ["wikitext_topic_ratios.png", "wikitext_topic_ratios.pdf", "wikitext_topic_ratios.csv"] \
        if corpus_available() else []
    figs = [f"{n}.{ext}" for n in ("stage1_topic_mode", "stage1_value_heatmap", "two_stage_norms") for ext in ("png", "pdf")]
    sde = [f"{n}.{ext}" for n in ("sde_residual_overlay", "sde_calibration") for ext in ("png", "pdf")]
    head = [*figs, "attention_table.csv", "attention_table.png", "attention_table.pdf", "gamma_star.png",
            "gamma_star.pdf", *sde, *text]
    assert names[:len(head)] == head and names[-1] == "report.json"
    # then the claims' validity maps (one per claim), their tables and claims.json, under claims/
    from figures.topic.claims import claims

    wikitext = ["wikitext_topic_ratios_above_one", "wikitext_topic_ratios_control_near_one"]  # untested without a corpus
    maps = {f"{n}.{ext}" for n in [*claims.registry().names, *wikitext] for ext in ("png", "pdf", "csv")}
    assert maps | {"claims.json"} <= set(names[len(head):-1])
    doc = json.loads((tmp_path / "claims" / "claims.json").read_text())
    assert [c["name"] for c in doc] == [*claims.registry().names, *wikitext]  # the real-text claims decided over seeds
    assert all(p.parent.name == "claims" for p in written[len(head):-1])
    assert all(p.is_file() and p.stat().st_size > 0 for p in written)
    from figures.topic.compare import compare

    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(
        json.dumps(compare(quick=True, device="cpu").to_json()))
