"""figures/report.py: one Report shape for every paper — judged vs diagnostic observables, claims,
Break rows with the same keys everywhere, strict JSON."""

import json
import math

from figures.report import BREAK_KEYS, REPORT_KEYS, Break, Claim, Observable, Report


def _report():
    return Report("p", "N=3", [Observable("a", 0.01, 0.05), Observable("b", 0.2, None, "diagnostic"),
                               Observable("c", math.nan, 0.1)],
                  [Claim("grows", "x grows like log T", True, {"slope": 1.02, "T": [1, 2, 3]}, "5 seeds")],
                  [Break("batch", {"batch": 16}, {"a": 0.3}, False, "small batches"), {"factor": "legacy"}])


def test_agreement_passed_is_judged_observables_only():
    rep = _report()
    assert [o.passed for o in rep.observables] == [True, None, False]  # NaN never passes
    assert rep.agreement_passed is False
    assert Report("p", "", [Observable("a", 0.01, 0.05), Observable("b", 9.0)]).agreement_passed is True
    assert rep.observable("b").note == "diagnostic" and rep.claim("grows").holds


def test_json_has_one_shape_and_is_strict():
    doc = _report().to_json()
    assert tuple(doc) == REPORT_KEYS
    assert doc["observables"]["c"] == {"rel_l2": None, "tolerance": 0.1, "passed": False, "note": ""}
    row = doc["where_agreement_breaks"][0]
    assert tuple(row) == BREAK_KEYS and row["setting"] == {"batch": 16} and row["within_tolerance"] is False
    assert doc["claims"][0]["evidence"] == {"slope": 1.02, "T": [1, 2, 3]}
    json.loads(json.dumps(doc, allow_nan=False))  # strict JSON: NaN written as null


def test_table_lists_every_row():
    lines = _report().table().splitlines()
    assert lines[0] == "p: N=3" and lines[-1] == "agreement_passed (observables only): False"
    assert any(ln.split()[:4] == ["a", "0.01", "0.05", "pass"] for ln in lines)
    assert any(ln.split()[:3] == ["b", "0.2", "-"] and ln.endswith("diagnostic") for ln in lines)
    assert "  agreement breaks: batch" in lines and "    setting: batch=16" in lines
    assert "    rel l2: a=0.3" in lines and "    note: small batches" in lines


def test_table_spells_out_mappings_and_keeps_lines_short():
    """A break row with nested settings and many observables (as JoMA's) prints no dict repr and no
    line over 120 characters; every value is still there; a long statement is wrapped, not cut."""
    rel = {f"observable_number_{i}": 0.1 * i for i in range(12)}
    setting = {"window": {"start": 0.25, "end": 0.75}, "drift": 1.5e-3}
    statement = ("the value of the attention logit grows like the logarithm of the time until the "
                 "softmax saturates, and then stays constant within the Assumption 1 window of the paper")
    rep = Report("joma", "the regime of Theorem 1 of the paper " * 6, [],
                 [Claim("long_one", statement, True, {}, "one run")],
                 [Break("time (G drifts from G(0): Assumption 1)", setting, rel, None, "drifts")])
    text = rep.table()
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120, max(lines, key=len)
    assert "{" not in text and "}" not in text and "'" not in text
    assert "window=(start=0.25, end=0.75), drift=0.0015" in text
    assert all(f"observable_number_{i}={0.1 * i:.4g}" in text for i in range(12))
    start = next(i for i, ln in enumerate(lines) if "long_one" in ln)
    words = " ".join(ln.strip() for ln in lines[start:start + 3]).split()
    assert " ".join(words[2:]) .startswith(statement)  # every word, none cut
