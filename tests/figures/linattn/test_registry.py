"""linattn's claims registry draft (figures/linattn/claims.toml): it loads (fields, references, protocols), the
derived flow passes its criterion at every in-regime point and the merged flow (a planted violation) fails it."""

from pathlib import Path

import pytest

import simulate
from figures.claims import planted_violation, theory_check
from figures.claims.registry import load_registry
from theory.linattn import LinAttnConfig, problem

TOML = Path(__file__).resolve().parents[3] / "figures" / "linattn" / "claims.toml"


@pytest.fixture(scope="module")
def claim():
    return load_registry(TOML, paper="linattn", config=LinAttnConfig, resolve=True).claims[0]


def test_staircase_theory_passes_its_criterion(claim):
    assert theory_check(claim).holds


def test_staircase_planted_violation_fails(claim):
    cfg = claim.protocol.config(LinAttnConfig, True).replace(variant="merged")
    assert planted_violation(claim, simulate.solve(problem(cfg), backend="scipy"), config=cfg).verdict == "fails"
