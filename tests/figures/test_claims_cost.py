"""The map's ``cost`` note (figures.claims.registry.Cost) and the full-mode rule built on it: a map
whose estimated CPU cost exceeds the allowance is not run on a CPU, and is named with its cost."""

from __future__ import annotations

from pathlib import Path

import pytest

import tiny.figures.claims as tiny_claims
from figures.claims import NeedsAccelerator, map_cost, plan_claim, registry_claims, too_costly
from figures.claims.registry import load_registry
from figures.context import RunContext
from helpers.tiny_row import tiny_registered
from theory import ConfigError
from tiny.theory import TinyConfig

TOML = Path(tiny_claims.__file__).with_name("claims.toml").read_text()
SEEDS = "seeds = { quick = 7, full = 12 }"


def _registry(tmp_path, cost: str) -> Path:
    p = tmp_path / "claims.toml"
    p.write_text(TOML.replace(SEEDS, SEEDS + "\n" + cost))
    return p


def test_the_loader_reads_and_refuses_cost_notes(tmp_path):
    reg = load_registry(_registry(tmp_path, 'cost = { seed_seconds = 2.5, note = "measured" }'), config=TinyConfig)
    cost = reg.get("gap_shrinks").map.cost
    assert (cost.seed_seconds, cost.note) == (2.5, "measured")
    assert cost.cell_seconds(TinyConfig(), 12) == 30.0
    assert load_registry(Path(tiny_claims.__file__).with_name("claims.toml")).get("gap_shrinks").map.cost is None
    for bad, msg in (("cost = { }", "give exactly one"), ("cost = { seed_seconds = -1 }", "seed_seconds"),
                     ('cost = { seed_seconds = 1, function = "a.b:c" }', "give exactly one"),
                     ('cost = { function = "nope" }', "cost.function"), ("cost = { seconds = 1 }", "unknown key")):
        with pytest.raises(ConfigError, match=msg):
            load_registry(_registry(tmp_path, bad), config=TinyConfig)


def test_full_maps_beyond_the_cpu_allowance_are_named_not_run(tmp_path, monkeypatch, capsys):
    """The tiny map in full mode: 9 grid cells, the null control's cell and the robustness variant's
    6 cells (one per in-regime rate) = 16 cells x 12 seeds; at 1e4 core-seconds per seed that is
    1.92e6 s = 533 core-hours (> 2): not run, concluded untested with the line; quick mode always runs; a larger
    allowance (RunContext.cpu_core_hours: --cpu-core-hours) or a Ray cluster runs it."""
    path = _registry(tmp_path, "cost = { seed_seconds = 1e4 }")
    with tiny_registered(claims=registry_claims("tiny", path)) as row:
        spec = load_registry(path, paper="tiny", config=TinyConfig, resolve=True).get("gap_shrinks")
        full = plan_claim(spec, quick=False)
        assert map_cost(full) == pytest.approx(16 * 12 * 1e4)
        need = too_costly(full, RunContext(device="cpu"))
        assert isinstance(need, NeedsAccelerator) and need.core_hours == pytest.approx(16 * 12 * 1e4 / 3600)
        assert str(need).startswith("needs a GPU/cluster: tiny/gap_shrinks ~533 core-hours (16 cells x 12 seeds")
        assert too_costly(plan_claim(spec, quick=True), RunContext(device="cpu")) is None
        assert too_costly(full, RunContext(device="cpu", cpu_core_hours=1000)) is None
        assert too_costly(full, RunContext(device="cpu", ray="auto")) is None  # a cluster runs it
        slot = row.slot("claims")
        monkeypatch.chdir(tmp_path)
        [result] = slot(RunContext(quick=False, device="cpu"))  # reported, not dropped: untested with the cost
        assert (result.name, result.verdict, result.untested_reason) == ("gap_shrinks", "untested", str(need))
        assert not (tmp_path / "figures").exists()  # nothing run
        assert str(need) in capsys.readouterr().err
        with pytest.raises(ConfigError, match="cpu_core_hours"):
            RunContext(cpu_core_hours="many")


@pytest.mark.parametrize("args, env", [(["--cpu-core-hours", "0"], {}), (["--cpu-core-hours", "-1"], {}),
                                       ([], {"TDYN_CPU_CORE_HOURS": "many"})])
def test_cli_refuses_a_bad_cpu_allowance_in_one_line(args, env, tmp_path):
    """``--cpu-core-hours`` (or the CLI's environment variable): a positive number, else one line, exit 2."""
    from click.testing import CliRunner

    from figures.cli import main

    res = CliRunner(env=env).invoke(main, ["claims", "scb", "--full", "--store", str(tmp_path), *args])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.output
    assert res.stderr.startswith("error: cpu_core_hours: ")
    assert not any(tmp_path.iterdir())  # nothing ran
