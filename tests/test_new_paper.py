"""A paper is a plugin: `tdyn new-paper NAME` writes a package that installs through the `tdyn.papers`
entry point and runs `tdyn derive`, `tdyn figures --quick` and its own contract tests, writing only in
its working directory; the worked example tests/tiny installs the same way.

The packages are installed with `pip install --target` into the temporary directory (not into the
test's environment) and found through PYTHONPATH, so the test leaves the environment as it found it.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from figures.newpaper import write_paper
from theory.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def _install(src: Path, site: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(src)], check=True, capture_output=True, timeout=300)


def _env(site: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env.update(MPLBACKEND="Agg", JAX_PLATFORMS="cpu")
    return env


def _run(args, cwd, env, timeout=600):
    res = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res


def _snapshot(folder: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_new_paper_installs_and_runs_writing_only_in_its_directory(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    repo_before = _snapshot(REPO / "figures")
    _run(["-m", "figures.cli", "new-paper", "demo", "--dir", str(work)], work, _env(tmp_path / "site"))
    assert (work / "demo" / "pyproject.toml").is_file() and (work / "demo" / "demo" / "paper.py").is_file()
    _install(work / "demo", tmp_path / "site")
    env = _env(tmp_path / "site")

    listed = _run(["-c", "from figures.papers import PAPERS; print(' '.join(PAPERS))"], work, env)
    assert "demo" in listed.stdout.split()  # the entry point put the row into the table
    derived = json.loads(_run(["-m", "figures.cli", "derive", "demo", "--format", "json"], work, env).stdout)
    assert derived["systems"][0]["state"] == ["a"]
    _run(["-m", "figures.cli", "figures", "demo", "--quick", "--no-progress"], work, env)
    out = work / "figures" / "out" / "demo"
    assert {"logit.png", "report.json"} <= {p.name for p in out.iterdir()}
    verdicts = json.loads((out / "claims" / "claims.json").read_text())
    assert [(c["name"], c["verdict"]) for c in verdicts] == [("gap_shrinks", "holds")]
    tests = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "demo"], work, env)
    assert " passed" in tests.stdout and "failed" not in tests.stdout

    assert _snapshot(REPO / "figures") == repo_before  # nothing written into the installed package


def test_tiny_is_a_plugin_package(tmp_path):
    """tests/tiny installs as any plugin: its entry point registers the row (no register() call)."""
    src = tmp_path / "tiny"
    shutil.copytree(REPO / "tests" / "tiny", src, ignore=shutil.ignore_patterns("__pycache__"))
    _install(src, tmp_path / "site")
    code = ("from figures.papers import get; r = get('tiny'); "
            "print(r.variants, r.slot('systems')()[0].name)")
    res = _run(["-c", code], tmp_path, _env(tmp_path / "site"))
    assert res.stdout.split() == ["('sgd',", "'exact')", "logit"]


@pytest.mark.parametrize("name, field", [("Demo", "name"), ("my paper", "name"), ("scb", "name"),
                                         ("json", "name"), ("figures", "name")])
def test_new_paper_refuses_bad_names(tmp_path, name, field):
    with pytest.raises(ConfigError) as err:
        write_paper(name, tmp_path)
    assert err.value.field == field and not any(tmp_path.iterdir())


def test_new_paper_refuses_an_existing_folder(tmp_path):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "mine.txt").write_text("keep")
    with pytest.raises(ConfigError, match="already exists") as err:
        write_paper("demo", tmp_path)
    assert err.value.field == "dir" and [p.name for p in tmp_path.iterdir()] == ["demo"]
    assert (tmp_path / "demo" / "mine.txt").read_text() == "keep"
