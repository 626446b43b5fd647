"""The tdyn CLI on scan-snap: bad input -> one line + exit 2; derive's JSON."""

import json

import pytest
from click.testing import CliRunner

from figures.cli import main


@pytest.mark.parametrize("args,field", [
    (["derive", "scan-snap", "--set", "eta_Y=0"], "eta_Y"),
    (["derive", "scan-snap", "--set", "eta_Z=-1"], "eta_Z"),
    (["derive", "scan-snap", "--set", "num_unique_per_next=0"], "num_unique_per_next"),
    (["derive", "scan-snap", "--set", "num_last=2", "--set", "num_next_per_last=2", "--set", "M=3"], "M"),
    (["train", "scan-snap", "--set", "T=1"], "T"),
    (["train", "scan-snap", "--set", "eta_Y=nan"], "eta_Y"),
    (["simulate", "scan-snap", "--set", "zero_init=false"], "zero_init"),
    (["train", "scan-snap", "--set", "vocab=big"], "vocab"),
    (["train", "scan-snap", "--variant", "counts", "--set", "variant=sequences", "--set", "steps=2"], "variant"),
    (["train", "scan-snap", "--variant", "tokens"], "variant"),
])
def test_cli_bad_input_one_line_exit_2(args, field):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    lines = [l for l in res.output.strip().splitlines() if l]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), res.output


def test_cli_derive_json():
    res = CliRunner().invoke(main, ["derive", "scan-snap", "--format", "json", "--set", "num_unique_per_next=3",
                                    "--set", "num_common=2"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    names = [s["name"] for s in doc["systems"]]
    assert names == ["snap", "reduced", "full"]
