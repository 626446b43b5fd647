"""JSON round trip: ``tdyn derive P --format json --system NAME`` writes one system that
``theory.load_system`` reads back to an equivalent system; a document of several needs a name and
the error names the available ones. No state or definition of a paper reads as a parameter."""

import json

import pytest
from click.testing import CliRunner
from sympy.printing.conventions import split_super_sub

from figures.cli import main
from figures.papers import PAPERS, get
from theory import ConfigError, load_system
from theory.export import latex
import sympy as sp


def _systems(name):
    row = get(name)
    return row.slot("systems")(row.make_config())


def test_one_system_round_trips_through_the_cli(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["derive", "scb", "--format", "json", "--system", "general", "--no-cache"])
    assert res.exit_code == 0, res.output
    path = tmp_path / "general.json"
    path.write_text(res.stdout)
    back = load_system(path)
    want = next(s for s in _systems("scb") if s.name == "general")
    assert back.equivalent(want)
    assert not back.equivalent(next(s for s in _systems("scb") if s.name == "symmetric"))
    bad = runner.invoke(main, ["derive", "scb", "--format", "json", "--system", "symetric"])
    assert bad.exit_code == 2
    assert bad.stderr.startswith("error: system: scb has no system 'symetric' (did you mean 'symmetric'?)")


def test_many_system_document_needs_a_name(tmp_path):
    res = CliRunner().invoke(main, ["derive", "scb", "--format", "json"])
    doc = json.loads(res.stdout)
    with pytest.raises(ConfigError, match=r"holds 4 systems \(symmetric, general, l1_symmetric, minibatch\)"):
        load_system(doc)
    path = tmp_path / "scb.json"
    path.write_text(res.stdout)
    for s in _systems("scb"):
        assert load_system(path, s.name).equivalent(s)
        assert load_system(res.stdout, name=s.name).equivalent(s)
    with pytest.raises(ConfigError, match="available: symmetric, general, l1_symmetric, minibatch"):
        load_system(doc, "nope")
    one = doc["systems"][0]
    assert load_system(one, "symmetric").equivalent(_systems("scb")[0])
    with pytest.raises(ConfigError, match="no system 'general'"):
        load_system(one, "general")


def _base(name: str) -> str:
    """The printed base letter of a symbol name (``eta_V`` -> ``\\eta``, ``lam`` -> ``\\lambda``)."""
    return latex(sp.Symbol(split_super_sub(name)[0]))


@pytest.mark.parametrize("name", list(PAPERS))
def test_no_state_or_definition_reads_as_a_parameter(name):
    """Across a paper's systems, no state/definition symbol has the printed base of a parameter
    (``\\eta`` vs ``\\eta_{V}``). A parameter that is a state of another system (a stage's frozen
    state, e.g. topic's stage-1 A in stage 2) is that same quantity, not a clash."""
    systems = _systems(name)
    quantities = {str(s) for sy in systems for s in (*sy.state, *(d for d, _ in sy.definitions))}
    parameters = {str(p) for sy in systems for p in sy.parameters} - quantities
    clashes = sorted((q, p) for q in quantities for p in parameters if _base(q) == _base(p))
    assert not clashes, f"{name}: {clashes}"
