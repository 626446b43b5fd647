"""The tdyn command: derive formats, bad input -> one line + exit 2, files written atomically."""

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from figures.cli import main
from helpers.trajectories import assert_same
from theory import scb


@pytest.fixture()
def runner():
    return CliRunner()


def _one_error_line(result):
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_derive_json_holds_the_4d_system(runner):
    res = runner.invoke(main, ["derive", "scb", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["paper"] == "scb"
    sym = next(s for s in doc["systems"] if s["name"] == "symmetric")
    assert sym["state"] == ["zeta", "omega", "xi", "beta"]
    assert set(sym["rhs"]) == set(sym["state"]) == set(sym["latex"])
    import sympy as sp

    # the strings parse back to the derived expressions
    S = scb.symmetric_system()
    local = {str(s): s for s in S.state + S.parameters + tuple(d for d, _ in S.definitions)}
    assert [d for d, _ in sym["definitions"]] == ["s", "n", "c"]  # the spec's named quantities (§3.3)
    for s, f in zip(S.state, S.expanded_rhs):
        parsed = S.expand_definitions(sp.sympify(sym["rhs"][str(s)], locals=local))
        assert sp.simplify(parsed - f) == 0


def test_derive_latex_renders_as_math(runner):
    import io

    from matplotlib import mathtext

    res = runner.invoke(main, ["derive", "scb", "--format", "latex"])
    assert res.exit_code == 0
    blocks = res.stdout.split("\\begin{align}")[1:]
    assert len(blocks) == 4  # symmetric, general, l1_symmetric, minibatch (the general system with its noise)
    for block in blocks:
        body = block.split("\\end{align}")[0]
        for line in body.strip().split("\\\\"):
            line = line.replace("\\nonumber", "").replace("&\\quad", "")
            lhs, rhs = line.replace("&:=", "&=").split("&=") if "&=" in line or "&:=" in line else ("", line)
            buf = io.BytesIO()
            mathtext.math_to_image(f"${lhs.strip()} = {rhs.strip()}$", buf, format="png")  # raises if not valid math
            assert buf.getbuffer().nbytes > 100


def test_derive_python_source_reproduces_numpy_population_gradient(runner):
    res = runner.invoke(main, ["derive", "scb", "--format", "python"])
    assert res.exit_code == 0
    ns: dict = {}
    exec(compile(res.stdout, "<tdyn derive scb --format python>", "exec"), ns)
    task = scb.make_task(scb.SCBConfig(N=3, T=10, Q=2))
    y = np.array([0.3, 1.2, 0.01, 0.8])
    p = [task.T, task.rho[0], task.K, task.m2, 0.4, 0.6]
    assert ns["STATE"] == ["zeta", "omega", "xi", "beta"] and ns["PARAMETERS"] == ["T", "rho", "K", "m2", "eta_V", "eta_A"]
    dy = ns["rhs"](0.0, y, p)
    V = y[0] * task.P_tilde + y[1] * np.outer(task.mu, np.ones(3))
    A = y[2] + task.Qm * y[3]
    dV, dA = scb.preconditioned_flow(V, A, task, 0.4, 0.6)
    assert np.allclose(dV, dy[0] * task.P_tilde + dy[1] * np.outer(task.mu, np.ones(3)), atol=1e-12)
    assert np.allclose(dA, dy[2] + task.Qm * dy[3], atol=1e-12)
    obs = ns["observables"](y, p)
    assert np.isclose(obs["population_loss"], scb.population_loss(V, A, task))


@pytest.mark.parametrize("args, field", [
    (["simulate", "scb", "--set", "Q=0"], "Q"),
    (["simulate", "scb", "--set", "Q=17"], "Q"),
    (["simulate", "scb", "--set", "P=[[0.5,0.5,0.5],[0.5,0.5,0.5],[0,0,0.1]]"], "P"),
    (["simulate", "scb", "--set", "eta_V=-0.1"], "eta_V"),
    (["train", "scb", "--set", "batch=0"], "batch"),
    (["simulate", "scb", "--set", "colour=red"], "colour"),
    (["simulate", "scb", "--set", "T=ten"], "T"),
    (["derive", "nonsense"], "paper"),
    (["train", "scb", "--variant", "adam", "--set", "steps=1"], "variant"),
    (["train", "scb", "--device", "cuda", "--set", "steps=1"], "device"),
    (["train", "scb", "--variant", "sgd", "--set", "lam=0.1", "--set", "steps=1"], "lam"),
    (["train", "scb", "--variant", "preconditioned", "--set", "softmax_lr_power=1", "--set", "steps=1"],
     "softmax_lr_power"),
])
def test_bad_input_one_line_exit_2(runner, tmp_path, args, field):
    out = tmp_path / "x.nc"
    res = runner.invoke(main, args + (["--out", str(out)] if args[0] in ("simulate", "train") else []))
    assert res.exit_code == 2, res.output
    line = _one_error_line(res)
    assert line.startswith(f"error: {field}:"), line
    assert os.listdir(tmp_path) == []  # nothing written


def test_diverging_run_exit_2_keeps_partial(runner, tmp_path):
    out = tmp_path / "run.nc"
    res = runner.invoke(main, ["train", "scb", "--device", "cpu", "--no-progress", "--set", "eta_A=5", "--set", "steps=3000",
                               "--set", "batch=64", "--set", "log_every=1", "--out", str(out)])
    assert res.exit_code == 2
    line = _one_error_line(res)
    assert "diverged at step" in line
    assert not out.exists()
    partial = tmp_path / "run.partial.nc"
    assert partial.exists()
    import simulate

    ds = simulate.load(partial)
    assert ds.attrs["status"] == -1 and ds.sizes["time"] >= 1
    assert [p.name for p in tmp_path.iterdir()] == ["run.partial.nc"]


def test_simulate_and_train_write_netcdf(runner, tmp_path):
    import simulate

    ode = tmp_path / "ode.nc"
    res = runner.invoke(main, ["simulate", "scb", "--backend", "scipy", "--set", "T=8", "--set", "steps=100", "--out", str(ode)])
    assert res.exit_code == 0, res.output
    ds = simulate.load(ode)
    assert ds.attrs["source"] == "ode" and "value_transition_correlation" in ds
    sde = tmp_path / "sde.nc"
    res = runner.invoke(main, ["simulate", "scb", "--sde", "--paths", "4", "--set", "T=8", "--set", "steps=20", "--out", str(sde)])
    assert res.exit_code == 0, res.output
    assert simulate.load(sde).sizes["path"] == 4
    tr = tmp_path / "train.nc"
    res = runner.invoke(main, ["train", "scb", "--device", "cpu", "--no-progress", "--set", "T=8", "--set", "steps=20",
                               "--set", "batch=32", "--out", str(tr)])
    assert res.exit_code == 0, res.output
    got = simulate.load(tr)
    assert got.attrs["source"] == "train" and got.sizes["time"] == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ode.nc", "sde.nc", "train.nc"]


def test_unknown_paper_is_one_line(runner):
    res = runner.invoke(main, ["derive", "nope"])
    assert res.exit_code == 2
    assert _one_error_line(res).startswith("error: paper: unknown paper 'nope'")


def test_diverging_sde_exit_2_keeps_partial(runner, tmp_path):
    out = tmp_path / "sde.nc"
    res = runner.invoke(main, ["simulate", "scb", "--sde", "--paths", "4", "--set", "T=8", "--set", "eta_A=5",
                               "--set", "steps=200", "--out", str(out)])
    assert res.exit_code == 2
    line = _one_error_line(res)
    assert "non-finite at t=" in line
    assert [p.name for p in tmp_path.iterdir()] == ["sde.partial.nc"]


def test_train_from_file_reruns_with_the_same_numbers(tmp_path):
    import simulate
    from figures.cli import main

    a, b = tmp_path / "a.nc", tmp_path / "b.nc"
    res = CliRunner().invoke(main, ["train", "scb", "--device", "cpu", "--no-progress", "--variant", "sgd",
                                    "--set", "T=8", "--set", "steps=20", "--set", "batch=16", "--set", "task_seed=7",
                                    "--out", str(a)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["train", "--from", str(a), "--no-progress", "--out", str(b)])
    assert res.exit_code == 0, res.output
    A, B = simulate.load(a), simulate.load(b)
    assert_same(A, B)
    assert json.loads(B.attrs["invocation"])["variant"] == "sgd"
    cfg = json.loads(A.attrs["config"])
    assert cfg["task_seed"] == 7 and cfg["seed"] == 0 and cfg["T"] == 8 and "code_version" in A.attrs


@pytest.mark.parametrize("args", [["figures", "joma", "--corpus", "/nonexistent/wt2"],
                                  ["reproduce", "--corpus", "/nonexistent/wt2"]])
def test_cli_missing_corpus_exits_2_with_one_line(args):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: corpus: "), res.stderr


def test_reproduce_jobs_runs_every_paper_in_its_own_process_and_reports_failures(monkeypatch, tmp_path):
    """``tdyn reproduce --jobs 2``: one ``tdyn figures P`` process per paper of the table (options
    passed on), every paper run even when one fails, then one error line and exit 1."""
    import io
    import subprocess

    from figures import context as core
    from figures.papers import PAPERS

    calls = []

    class FakePopen:  # each paper's `tdyn figures P` process, finished at once
        def __init__(self, cmd, **kw):
            calls.append(cmd)
            self.args, self.paper = cmd, cmd[cmd.index("figures", 3) + 1]
            self.returncode = 1 if self.paper == "topic" else 0

            self.stdout, self.stderr = io.StringIO(f"wrote {self.paper}\n"), io.StringIO("")

        def wait(self):
            return self.returncode

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    monkeypatch.setattr(core, "OUT_DIR", tmp_path)
    res = CliRunner().invoke(main, ["reproduce", "--quick", "--jobs", "2", "--device", "cpu", "--no-progress"])
    assert res.exit_code == 1
    assert sorted(c[c.index("figures", 3) + 1] for c in calls) == sorted(PAPERS)
    assert all("--quick" in c and c[c.index("--device") + 1] == "cpu" and "--no-progress" in c for c in calls)
    assert res.stderr.strip().splitlines()[-1] == "error: reproduce: the figures of topic failed (output above)"
    assert all(f"wrote {p}" in res.stdout for p in PAPERS)
