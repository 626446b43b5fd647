"""SCB's figures package: the figures slot, the direction of imports, the Break rows."""

import ast
import inspect
from pathlib import Path

import figures.scb as fscb
from figures.papers import get
from figures.report import BREAK_KEYS, Break
from theory import scb

PKG = Path(fscb.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
            out.update("." * node.level + a.name for a in node.names if not node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_figures_slot_is_the_figures_tuple_with_one_signature():
    figs = get("scb").slot("figures")
    assert figs is fscb.FIGURES and len(figs) == 6 and figs[-1] is fscb.fig_svag
    for fig in figs:
        params = inspect.signature(fig).parameters
        assert list(params)[:2] == ["outdir", "quick"] and params["device"].kind is inspect.Parameter.KEYWORD_ONLY
    assert not hasattr(fscb, "make_figures")  # the collector figures.make.make_figures writes report.json


def test_compare_and_claims_never_import_the_figures_module():
    for name in ("compare.py", "claims.py", "l1.py"):
        imported = _imports(PKG / name)
        assert not any(m in (".figures", "figures.scb.figures") for m in imported), (name, imported)
    assert ".compare" in _imports(PKG / "figures.py")


def test_where_agreement_breaks_rows_are_break_rows():
    """One row per setting (batch 64/256/16, then 0.25 and 0.9 of the stability bound), the shared
    Break keys, rel_l2 of the correlation observables, judged at the compare tolerance."""
    cfg = scb.SCBConfig(N=3, T=8, Q=2, eta_V=0.05, eta_A=0.05, batch=64, steps=40, log_every=10)
    rows = fscb.agreement_breakdown(cfg, device="cpu")
    assert [r.factor for r in rows] == ["batch"] * 3 + ["learning_rate"] * 2
    assert [r.setting["batch"] for r in rows] == [64, 256, 16, 64, 64]
    task = scb.make_task(cfg)
    bound = 2 / (task.m2 * cfg.T)
    assert [r.setting["lr"] for r in rows[3:]] == [0.25 * bound, 0.9 * bound]
    for r in rows:
        assert isinstance(r, Break) and tuple(r.to_json()) == BREAK_KEYS
        assert set(r.rel_l2) == set(scb.CORRELATION_OBSERVABLES)
        assert r.within_tolerance == all(v <= fscb.TOLERANCE for v in r.rel_l2.values())
