"""``tdyn claims P --format latex``: a booktabs table with one row per claim whose verdicts are the
JSON output's, that compiles in a document with ``booktabs`` (pdflatex and pdftotext, where
installed: ``.ci/run`` installs them)."""

import json
import re

import pytest
from click.testing import CliRunner

from figures.claims.report import claims_latex
from figures.cli import main
from helpers.latex import GARBLED, have_tex, pdf_text
from helpers.tiny_row import tiny_registered


def _compile(table: str, tmp_path) -> str:
    doc = "\n".join([r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}",
                     r"\begin{document}", table, r"\end{document}", ""])
    return pdf_text(doc, tmp_path, "t")


def _rows(table: str) -> list[list[str]]:
    """The body rows between ``\\midrule`` and ``\\bottomrule``, split into cells."""
    body = table.split("\\midrule\n", 1)[1].split("\\bottomrule", 1)[0]
    return [[c.strip() for c in re.split(r"(?<!\\)&", row.removesuffix(r"\\").strip())] for row in body.splitlines()]


@pytest.fixture(scope="module")
def tiny_docs(tmp_path_factory):
    """The tiny paper's claims through the real CLI: the JSON, then the LaTeX from the same store."""
    store = tmp_path_factory.mktemp("store")
    runner = CliRunner()
    args = ["claims", "tiny", "--store", str(store), "--no-progress", "--device", "cpu"]
    with tiny_registered():
        res = runner.invoke(main, [*args, "--json"])
        assert res.exit_code == 0, res.output
        tex = runner.invoke(main, [*args, "--format", "latex"])
        assert tex.exit_code == 0, tex.output
        same = runner.invoke(main, [*args, "--format", "json"])
    assert json.loads(same.stdout) == json.loads(res.stdout)
    return json.loads(res.stdout), tex.stdout


def test_cli_latex_has_one_row_per_claim_with_the_json_verdicts(tiny_docs):
    docs, tex = tiny_docs
    assert tex.lstrip().startswith(r"\begin{table}") and r"\toprule" in tex and r"\bottomrule" in tex
    rows = _rows(tex)
    assert len(rows) == len(docs) >= 1
    for row, d in zip(rows, docs):
        assert len(row) == 6
        assert row[0] == d["name"].replace("_", r"\_") and row[1] == d["verdict"]
        assert row[3] == f"{d['estimate']:.4g} [{d['interval'][0]:.4g}, {d['interval'][1]:.4g}]"
        assert row[4] == str(d["seeds"]) and row[5].startswith(d["grade"])


def _variants(d: dict) -> list[dict]:
    """The tiny claim and three made-up ones: another verdict, an undecided (untested) one, and a
    name with characters LaTeX treats specially."""
    return [d, {**d, "name": "second_claim", "verdict": "fails"},
            {**d, "name": "never_run", "verdict": "untested", "estimate": None, "interval": None, "seeds": 0},
            {**d, "name": "odd & 50% #1 <x>|y", "verdict": "inconclusive"}]


def test_undecided_and_special_character_rows():
    docs = _variants(json.loads(json.dumps(_tiny_doc_template())))
    rows = _rows(claims_latex(docs, "toy"))
    assert [r[1] for r in rows] == ["holds", "fails", "untested", "inconclusive"]
    assert rows[2][3] == "n/a" and rows[2][4] == "0"
    assert rows[3][0] == r"odd \& 50\% \#1 \textless{}x\textgreater{}\textbar{}y"
    assert _rows(claims_latex([], "toy")) == [[r"\multicolumn{6}{@{}l}{no claims}"]]


def _tiny_doc_template() -> dict:
    return {"name": "gap_shrinks", "verdict": "holds", "level": 0.95, "estimate": 0.5, "interval": [0.25, 0.75],
            "statistic": {"name": "log_gap_ratio"}, "seeds": 12, "grade": "A", "test": "exact sign test, Holm"}


@pytest.mark.skipif(not have_tex("booktabs"), reason="no pdflatex/pdftotext/booktabs (.ci/run installs them)")
def test_latex_table_compiles_with_booktabs(tiny_docs, tmp_path):
    docs, tex = tiny_docs
    text = _compile(tex, tmp_path)
    for d in docs:
        assert f"{d['name']} {d['verdict']} {d['statistic']['name']}" in text
    more = _variants(docs[0])
    text = _compile(claims_latex(more, "toy & co"), tmp_path)
    for d in more:
        assert f"{d['name']} {d['verdict']}" in text, text
    assert "Claims of toy & co" in text and not [c for c in GARBLED if c in text]
