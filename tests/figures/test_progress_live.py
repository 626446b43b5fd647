"""Live progress across processes (``tdyn reproduce --jobs J``): each child ``tdyn figures P
--progress-lines`` reports its bars as lines on stderr; the parent shows, on a terminal only, one
bar per paper naming the figure being made, with an ETA from the paper's measured time."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import sys
import termios
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from figures import progress
from figures.cli import main
from figures.papers import PAPERS, Paper, register

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
#: a child ``tdyn`` that knows the tiny paper (tests/tiny), as `tdyn reproduce` starts a real paper's
_CHILD = ("import sys; sys.path.insert(0, {tests!r}); from tiny import ROW; "
          "from figures.papers import Paper, register; register(Paper(**ROW)); "
          "from figures.cli import main; main(sys.argv[1:], prog_name='tdyn')")


@pytest.fixture
def tiny_row():
    from tiny import ROW

    row = register(Paper(**ROW))
    yield row
    PAPERS.pop("tiny")


def _messages(stderr: str) -> list[dict]:
    return [json.loads(ln[len(progress.PREFIX):]) for ln in stderr.splitlines() if ln.startswith(progress.PREFIX)]


def test_child_reports_each_figure_as_a_progress_line(tiny_row, tmp_path):
    res = CliRunner().invoke(main, ["figures", "tiny", "--outdir", str(tmp_path), "--device", "cpu",
                                    "--progress-lines"])
    assert res.exit_code == 0, res.output
    msgs = _messages(res.stderr)
    top = [m for m in msgs if m["desc"] == "tiny" and m["unit"] == "fig"]
    # the outer bar over fig_logit, the claims and the compare report, each named as it starts
    assert [m["postfix"] for m in top if m["postfix"]][:1] == ["fig_logit"]
    assert {"fig_logit", "claims (validity maps)", "compare (report.json)"} <= {m["postfix"] for m in top}
    assert top[-1].get("closed") and top[-1]["n"] == top[-1]["total"] == 3
    assert "wrote" in res.stdout and progress.PREFIX not in res.stdout


def test_without_progress_lines_the_child_reports_nothing(tiny_row, tmp_path):
    res = CliRunner().invoke(main, ["figures", "tiny", "--outdir", str(tmp_path), "--device", "cpu", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert progress.PREFIX not in res.stderr


def test_job_line_names_the_paper_the_step_and_an_eta():
    job = progress._Job("scb", prior=600.0)
    assert "scb: starting" in job.line()[1] and "ETA ~" in job.line()[1]
    job.feed({"id": 1, "desc": "scb", "n": 1, "total": 5, "unit": "fig", "postfix": "fig_overlay"})
    job.feed({"id": 2, "desc": "claims_l1: 8 cells to run", "n": 3, "total": 8, "unit": "cell", "postfix": ""})
    frac, text = job.line()
    want = r"scb: fig_overlay \(fig 2/5\) · claims_l1 3/8 cell · 0:0\d elapsed, ETA ~(9:5\d|10:00)"
    assert re.fullmatch(want, text), text
    job.feed({"id": 2, "closed": True})
    assert "cell" not in job.line()[1]
    no_prior = progress._Job("tiny", prior=None)  # full mode: nothing measured -> from the figures done
    no_prior.feed({"id": 1, "desc": "tiny", "n": 0, "total": 3, "unit": "fig", "postfix": "fig_logit"})
    assert no_prior.line()[1].endswith("ETA unknown")


_PARENT = textwrap.dedent("""
    import sys
    from figures import progress
    child = [sys.executable, "-c", {child!r}]
    cmds = {{name: child + ["figures", "tiny", "--outdir", out, "--device", "cpu", "--progress-lines"]
             for name, out in (("tiny-a", {a!r}), ("tiny-b", {b!r}))}}
    progress.run_children(cmds, {{"tiny-a": 3600.0, "tiny-b": 3600.0}}, 2,
                          lambda name, res: progress.echo(f"== {{name}} {{res.returncode}} {{res.stderr!r}}"))
""")


def _run_in_pty(code: str, env: dict) -> str:
    """Run ``python -c code`` with a 200-column pseudo-terminal as its stdout and stderr; its output."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execve(sys.executable, [sys.executable, "-c", code], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    out = bytearray()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out.extend(chunk)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


def test_parent_shows_a_live_bar_per_paper_under_a_terminal(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    env.pop("TDYN_PROGRESS", None)
    code = _PARENT.format(child=_CHILD.format(tests=str(TESTS)), a=str(tmp_path / "a"), b=str(tmp_path / "b"))
    out = _run_in_pty(code, env)
    frames = [f for f in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", out)) if f.strip()]
    for name in ("tiny-a", "tiny-b"):
        want = rf"{name}: fig_logit \(fig 1/3\) · \d+:\d\d elapsed, ETA ~\d+:\d\d"
        named = [f for f in frames if re.search(want, f)]
        assert named, "\n".join(frames[-20:])
        assert f"== {name} 0 ''" in out  # the child's stderr held progress lines only, all consumed
    assert any(re.match(r"papers 0/2 done, 2 running, ETA ~\d+:\d\d", f) for f in frames)
    assert progress.PREFIX not in out
    assert (tmp_path / "a" / "logit.png").is_file() and (tmp_path / "b" / "logit.png").is_file()


def test_parent_without_a_terminal_shows_no_bars(tmp_path, capsys):
    code = [sys.executable, "-c", "import sys; sys.stderr.write('@tdyn-progress {\"id\": 0, \"desc\": \"x\", "
            "\"n\": 0, \"total\": 1, \"unit\": \"fig\", \"postfix\": \"f\"}\\nwarning: kept\\n'); print('out')"]
    done = []
    progress.run_children({"p": code}, {"p": 10.0}, 1, lambda name, res: done.append((name, res)))
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""  # no bars: stderr is not a terminal
    [(name, res)] = done
    assert name == "p" and res.stdout == "out\n" and res.stderr == "warning: kept\n" and res.returncode == 0


def test_reproduce_asks_the_children_for_progress_lines_on_a_terminal(monkeypatch):
    from figures import cli
    from figures.context import RunContext

    seen = {}
    monkeypatch.setattr(progress, "active", lambda: True)
    monkeypatch.setattr(progress, "run_children",
                        lambda cmds, priors, jobs, on_done: seen.update(cmds=cmds, priors=priors))
    cli._reproduce_in_processes(RunContext(quick=True, device="cpu"), 2)
    assert set(seen["cmds"]) == set(PAPERS)
    assert all("--progress-lines" in c and "--no-progress" not in c for c in seen["cmds"].values())
    assert seen["priors"] == {n: PAPERS[n].quick_seconds for n in PAPERS}  # the measured quick time: the prior
