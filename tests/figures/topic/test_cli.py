"""`tdyn ... topic`: bad input -> one line `error: <field>: ...` and exit 2; derive/simulate work."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from figures.cli import main


@pytest.mark.parametrize("assignments,field", [
    (["p_c=0.6", "p_r=0.5"], "p_r"),
    (["tau=5", "T=4"], "tau"),
    (["v=1"], "v"),
    (["N=0"], "N"),
    (["p_m=1.5"], "p_m"),
    (["keys=both"], "keys"),
    (["lr=nan"], "lr"),
    (["N=5", "N_max=3"], "N_max"),
    (["T=abc"], "T"),
])
def test_bad_input_one_line_exit_2(assignments, field):
    args = ["simulate", "topic"]
    for a in assignments:
        args += ["--set", a]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), res.output


def test_derive_json_and_simulate():
    runner = CliRunner()
    res = runner.invoke(main, ["derive", "topic", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    names = [s["name"] for s in doc["systems"]]
    assert names == ["stage1_theory", "embedding_theory", "stage2_theory", "two_stage_theory"]
    res = runner.invoke(main, ["simulate", "topic", "--backend", "scipy", "--set", "T=5", "--set", "v=4",
                               "--set", "steps=100", "--set", "log_every=50"])
    assert res.exit_code == 0, res.output
    assert "topic_mode" in res.output


@pytest.mark.parametrize("variant,setting", [("stage1", "attention=trained"), ("embedding", "d_a=8")])
def test_train_setting_the_variant_ignores_exits_2(variant, setting):
    res = CliRunner().invoke(main, ["train", "topic", "--variant", variant, "--set", setting, "--set", "steps=1",
                                    "--device", "cpu", "--no-progress"])
    assert res.exit_code == 2, res.output
    field = setting.split("=")[0]
    assert res.output.strip().splitlines()[-1].startswith(f"error: {field}:"), res.output
