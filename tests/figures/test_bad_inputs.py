"""A table of bad inputs through the real CLI: each gives one line ``error: <field>: ...``,
exit code 2, and creates no file or directory. The table runs in one child process under an
address-space limit and a per-row alarm (a row that started allocating or hanging fails instead of
taking the machine down). The property tests of the config validation itself (hypothesis) are in
tests/theory/test_params.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from figures.papers import PAPERS

ROOT = Path(__file__).resolve().parents[2]
BIG = "1" + "0" * 400  # an integer beyond float range

#: (id, argv, field); ``{tmp}`` is a fresh empty folder (the cwd), ``{file}`` an existing file in
#: another folder, ``{ro}`` a directory nobody can create files in (root included)
ROWS = [
    ("N-overflow", ["simulate", "scb", "--set", "N=1e400"], "N"),
    ("steps-overflow", ["train", "scb", "--set", "steps=1e400"], "steps"),
    ("int-beyond-float", ["derive", "scb", "--set", f"N={BIG}"], "N"),
    ("float-beyond-float", ["simulate", "scb", "--set", f"eta_V={BIG}"], "eta_V"),
    ("P-string", ["simulate", "scb", "--set", "P=abc"], "P"),
    ("P-matrix-with-string", ["simulate", "scb", "--set", "P=[[0.5,'a'],[0.5,0.5]]"], "P"),
    ("task-seed-negative", ["simulate", "scb", "--set", "task_seed=-5"], "task_seed"),
    ("seed-too-large", ["train", "scb", "--set", "seed=5000000000"], "seed"),
    ("sde-seed-negative", ["simulate", "scb", "--sde", "--seed", "-1"], "seed"),
    ("scb-N-1e5", ["train", "scb", "--set", "N=100000"], "N"),
    ("scb-N-1e8", ["simulate", "scb", "--set", "N=100000000"], "N"),
    ("scb-batch-1e9", ["train", "scb", "--set", "batch=1000000000"], "batch"),
    ("topic-N-1e9", ["train", "topic", "--set", "N=1000000000"], "N"),
    ("scan-snap-num-common-1e8", ["train", "scan-snap", "--set", "num_common=100000000"], "num_common"),
    ("steps-1e10", ["train", "scb", "--set", "steps=10000000000"], "steps"),
    ("joma-derive-huge", ["derive", "joma", "--set", "Mc=100000", "--set", "d=100001"], ("Mc", "d")),
    ("joma-simulate-huge", ["simulate", "joma", "--set", "Mc=100000", "--set", "d=100001"], ("Mc", "d")),
    # lr=1e6: 200 Euler steps of dt = lr per path (within the limits); the SDE diverges at once: `solve:`
    ("joma-sde-lr-1e6", ["simulate", "joma", "--sde", "--paths", "4", "--set", "lr=1e6", "--set", "steps=200"], ("lr", "solve")),
    ("out-read-only", ["simulate", "scb", "--out", "{ro}/x.nc"], "out"),
    ("out-is-directory", ["simulate", "scb", "--out", "{tmp}"], "out"),
    ("out-missing-dir", ["train", "scb", "--out", "{tmp}/no/such/x.nc"], "out"),
    ("paths-abc", ["simulate", "scb", "--sde", "--paths", "abc"], "paths"),
    ("format-yaml", ["derive", "scb", "--format", "yaml"], "format"),
    ("outdir-file", ["figures", "scb", "--outdir", "{file}"], "outdir"),
    ("unknown-flag", ["simulate", "scb", "--bogus"], "bogus"),
    ("unknown-command", ["simulat", "scb"], "command"),
    ("figures-unknown-paper", ["figures", "nope", "--outdir", "o"], "paper"),
    ("figures-path-paper", ["figures", "../../zz"], "paper"),
    ("figures-outdir-read-only", ["figures", "scb", "--outdir", "{ro}/figs"], "outdir"),
    ("variant", ["train", "scb", "--variant", "adam"], "variant"),
    ("resume-without-checkpoint", ["train", "scb", "--resume"], "resume"),
    ("checkpoint-every-negative", ["train", "scb", "--checkpoint", "ck", "--checkpoint-every", "-3"], "checkpoint_every"),
    ("from-missing", ["simulate", "--from", "{tmp}/none.nc"], "from"),
    ("scb-lam-switch-negative", ["train", "scb", "--set", "lam=0.001", "--set", "lam_switch=-1"], "lam_switch"),
]

_CHILD = textwrap.dedent(r"""
    import json, os, resource, signal, sys
    from click.testing import CliRunner
    resource.setrlimit(resource.RLIMIT_AS, (6 * 2**30, 6 * 2**30))
    from figures.cli import main
    out = {}
    def alarm(*a):
        raise TimeoutError("row took longer than 60 s")
    signal.signal(signal.SIGALRM, alarm)
    for rid, argv, tmp in json.loads(sys.stdin.read()):
        os.chdir(tmp)
        signal.alarm(60)
        try:
            res = CliRunner().invoke(main, argv)
            out[rid] = {"code": res.exit_code, "stderr": res.stderr, "exc": repr(res.exception)}
        except BaseException as err:
            out[rid] = {"code": -1, "stderr": "", "exc": repr(err)}
        signal.alarm(0)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """Run every row once, each in its own empty folder; return (results, folders)."""
    base = tmp_path_factory.mktemp("bad")
    other = base / "other"
    other.mkdir()
    (other / "afile").write_text("x")
    jobs, folders = [], {}
    for rid, argv, _ in ROWS:
        tmp = base / rid / "a" / "b"  # nested: ../../zz would land inside base/rid
        tmp.mkdir(parents=True)
        folders[rid] = tmp
        argv = [a.format(tmp=tmp, file=other / "afile", ro="/proc") for a in argv]
        jobs.append((rid, argv, str(tmp)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(jobs), capture_output=True,
                          text=True, env=env, timeout=600, cwd=base)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), folders, base


@pytest.mark.parametrize("rid, argv, field", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_one_line_exit_2_nothing_created(table, rid, argv, field):
    results, folders, base = table
    res = results[rid]
    lines = [ln for ln in res["stderr"].splitlines() if ln.strip()]
    assert res["code"] == 2, res
    assert len(lines) == 1, res["stderr"]
    fields = field if isinstance(field, tuple) else (field,)
    assert any(lines[0].startswith(f"error: {f}: ") for f in fields), lines[0]
    # nothing created: the row's folder and its parents hold only what the fixture made
    assert list(folders[rid].iterdir()) == []
    assert [p.name for p in folders[rid].parent.parent.iterdir()] == ["b"] or \
        sorted(p.name for p in folders[rid].parent.iterdir()) == ["b"]
    assert not (base / "zz").exists() and not (folders[rid].parent.parent.parent / "zz").exists()


def test_help_still_prints_usage():
    from click.testing import CliRunner

    from figures.cli import main

    res = CliRunner().invoke(main, ["simulate", "-h"])
    assert res.exit_code == 0 and "Usage:" in res.stdout and "--allow-large" in res.stdout


def test_allow_large_lifts_the_refusal(monkeypatch):
    """The limit is what refuses (not the field validation): a tighter limit refuses the default
    config, --allow-large runs it."""
    from click.testing import CliRunner

    from figures.cli import main
    from theory import limits

    monkeypatch.setitem(limits.LIMITS, "log_points", 10)
    res = CliRunner().invoke(main, ["simulate", "scb", "--backend", "scipy", "--set", "steps=100"])
    assert res.exit_code == 2 and res.stderr.startswith("error: steps: needs an estimated 22 logged time points")
    res = CliRunner().invoke(main, ["simulate", "scb", "--backend", "scipy", "--set", "steps=100", "--allow-large"])
    assert res.exit_code == 0, res.output


def test_scipy_divergence_same_contract_as_diffrax(tmp_path):
    """eta_V=1e300 on the scipy backend: one ``solve:`` line naming the system, exit 2, and a
    .partial.nc holding the finite initial state — as diffrax does (diffrax itself is left out here:
    it spends its 10^6-step budget first, ~60 s)."""
    from click.testing import CliRunner

    import simulate
    from figures.cli import main

    for backend in ("scipy",):
        out = tmp_path / f"{backend}.nc"
        res = CliRunner().invoke(main, ["simulate", "scb", "--backend", backend, "--set", "eta_V=1e300",
                                        "--set", "steps=50", "--out", str(out)])
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.exit_code == 2 and len(lines) == 1, res.stderr
        assert lines[0].startswith("error: solve: scb/symmetric failed: ") and "partial trajectory kept" in lines[0]
        part = simulate.load(tmp_path / f"{backend}.partial.nc")
        assert part.sizes["time"] >= 1 and float(part.time[0]) == 0.0
        assert all(bool(part[v].notnull().all()) for v in ("zeta", "omega", "xi", "beta"))
        assert part.attrs["status"] == -1 and json.loads(part.attrs["config"])["eta_V"] == 1e300
        assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ["joma", "--set", "lr=100"],  # finite-time blow-up: was 10^6 steps, 245 s
    ["scb", "--set", "eta_V=1e300", "--set", "steps=50"],  # was 10^6 steps, ~60 s
])
def test_diffrax_stops_early_and_keeps_the_initial_state(tmp_path, args):
    """Divergence stops diffrax early: at |y| > 1e150 or at the step-size floor, whichever first."""
    from click.testing import CliRunner

    import simulate
    from figures.cli import main

    out = tmp_path / "x.nc"
    res = CliRunner().invoke(main, ["simulate", *args, "--out", str(out)])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "(diverged)" in res.stderr or "minimum step size" in res.stderr, res.stderr
    part = simulate.load(tmp_path / "x.partial.nc")
    assert part.sizes["time"] >= 1 and int(part.attrs["n_steps"]) < 10**5
