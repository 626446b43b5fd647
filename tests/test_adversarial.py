"""An adversarial probe as a table: each hostile case through the real CLI and the contract
it must meet — one line ``error: <field>: <message>`` on stderr, exit code 2, nothing written
besides what the case itself prepared, and no hang (each case under a time limit).

The table runs in one child process (an address-space limit, a per-row alarm): every row gets a
fresh folder (its cwd); ``pre`` commands (untimed) and ``mutate`` steps (truncate, flip bytes,
touch, ...) prepare the damage, then the row's command is timed. The store's cell-validity check
(a damaged cell is recomputed with a warning), the ``--set``/``--grid`` parsing and the SDE
step estimate (hypothesis), a disk that refuses the write, signals (sweep with 1 and 2 workers,
reproduce --jobs), two sweeps on one store and Ray addresses that are not Ray are tested below the
table, each in seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from helpers.signals import user_terminal

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
#: a row must end within this many seconds of its start (imports done beforehand)
ROW_SECONDS = 20
LONG = "x" * 250  # with a suffix: a file name over 255 bytes
SCB_TINY = ["--set", "steps=20", "--set", "log_every=10"]

#: (id, pre (argv lists run first, untimed), mutate (steps), argv, field)
#: ``{tmp}`` is the row's folder (its cwd)
ROWS = [
    # item 6: a store whose cells/ is a file
    ("store-cells-is-a-file", [], [("write", "S/cells", "x")],
     ["sweep", "scb", "--kind", "ode", "--backend", "scipy", "--grid", "steps=50,60", "--store", "S",
      "--no-progress"], "store"),
    ("store-is-a-file", [], [("write", "S", "x")],
     ["sweep", "scb", "--kind", "ode", "--backend", "scipy", "--grid", "steps=50,60", "--store", "S",
      "--no-progress"], "store"),
]

# item 3: names over 255 bytes (or leaving no room for a file written beside them) refused before work
ROWS += [
    ("out-name-over-255", [], [], ["simulate", "scb", "--out", LONG + LONG + ".nc"], "out"),
    ("out-name-no-room-for-partial", [], [], ["simulate", "scb", "--out", LONG[:247] + ".nc"], "out"),
    ("train-out-name-over-255", [], [], ["train", "scb", *SCB_TINY, "--out", LONG + LONG + ".nc"], "out"),
    ("checkpoint-name-over-255", [], [], ["train", "scb", *SCB_TINY, "--checkpoint", LONG + LONG], "checkpoint"),
    ("checkpoint-nested-name-over-255", [], [], ["train", "scb", *SCB_TINY, "--checkpoint", "a/" + LONG + LONG],
     "checkpoint"),
    ("plot-out-name-over-255", [["simulate", "scb", "--backend", "scipy", *SCB_TINY, "--out", "t.nc"]], [],
     ["plot", "t.nc", "--out", LONG + LONG + ".png"], "out"),
    ("plot-file-name-over-255", [], [], ["plot", LONG + LONG + ".nc"], "file"),
    ("plot-vs-name-over-255", [["simulate", "scb", "--backend", "scipy", *SCB_TINY, "--out", "t.nc"]], [],
     ["plot", "t.nc", "--vs", LONG + LONG + ".nc"], "vs"),
    ("figures-outdir-name-over-255", [], [], ["figures", "scb", "--outdir", LONG + LONG], "outdir"),
    ("train-from-name-over-255", [], [], ["train", "--from", LONG + LONG + ".nc"], "from"),
    ("simulate-from-name-over-255", [], [], ["simulate", "--from", LONG + LONG + ".nc"], "from"),
    ("sweep-store-name-over-255", [], [],
     ["sweep", "scb", "--kind", "ode", "--grid", "steps=50,60", "--store", LONG + LONG, "--no-progress"], "store"),
    ("claims-store-name-over-255", [], [], ["claims", "scb", "--store", LONG + LONG, "--no-progress"], "store"),
    ("figures-corpus-name-over-255", [], [], ["figures", "scb", "--corpus", LONG + LONG], "corpus"),
    ("path-over-4096", [], [], ["simulate", "scb", "--out", "/".join([LONG] * 17) + "/x.nc"], "out"),
]

# item 4 (damaged inputs) and item 11 (a checkpoint replaced without a word, --resume of nothing)
_TRAIN_CK = ["train", "scb", *SCB_TINY, "--checkpoint", "ck", "--checkpoint-every", "0", "--no-progress"]
ROWS += [
    ("train-from-flipped-bytes", [["train", "scb", *SCB_TINY, "--out", "t.nc", "--no-progress"]],
     [("flip", "t.nc")], ["train", "--from", "t.nc", "--no-progress"], "from"),
    ("simulate-from-flipped-bytes", [["train", "scb", *SCB_TINY, "--out", "t.nc", "--no-progress"]],
     [("flip", "t.nc")], ["simulate", "--from", "t.nc"], "from"),
    ("train-from-truncated", [["train", "scb", *SCB_TINY, "--out", "t.nc", "--no-progress"]],
     [("truncate", "t.nc", "0.5")], ["train", "--from", "t.nc", "--no-progress"], "from"),
    ("resume-truncated-checkpoint", [_TRAIN_CK], [("truncate", "ck/checkpoint.pt", "0.5")],
     [*_TRAIN_CK, "--resume"], "resume"),
    ("resume-flipped-checkpoint", [_TRAIN_CK], [("flip", "ck/checkpoint.pt")], [*_TRAIN_CK, "--resume"], "resume"),
    ("resume-empty-checkpoint-file", [_TRAIN_CK], [("write", "ck/checkpoint.pt", "")], [*_TRAIN_CK, "--resume"],
     "resume"),
    ("resume-empty-checkpoint-folder", [], [("mkdir", "ck")], [*_TRAIN_CK, "--resume"], "resume"),
    ("resume-missing-checkpoint-folder", [], [], [*_TRAIN_CK, "--resume"], "resume"),
    ("checkpoint-of-another-run-kept", [_TRAIN_CK], [], _TRAIN_CK, "checkpoint"),
    ("checkpoint-json-only-kept", [], [("write", "ck/checkpoint.json", "{}")], _TRAIN_CK, "checkpoint"),
]

# item 10: nothing dropped silently from --grid / --set
_SWEEP = ["sweep", "scb", "--kind", "ode", "--backend", "scipy", "--store", "S", "--no-progress"]
ROWS += [
    ("grid-given-twice", [], [], [*_SWEEP, "--grid", "N=3,4", "--grid", "N=5"], "N"),
    ("grid-and-set-same-key", [], [], [*_SWEEP, "--grid", "N=3,4", "--set", "N=5"], "N"),
    ("grid-lists-a-value-twice", [], [], [*_SWEEP, "--grid", "N=3,3"], "N"),
    ("grid-seed-and-seeds", [], [], [*_SWEEP, "--grid", "seed=0,1", "--seeds", "2"], "seed"),
    *[(f"set-twice-{paper}", [], [], ["simulate", paper, "--set", "steps=10", "--set", "steps=20"], "steps")
      for paper in ("scb", "scan-snap", "topic", "joma")],
    ("set-twice-train", [], [], ["train", "scb", "--set", "steps=10", "--set", "steps=10"], "steps"),
    ("set-twice-sweep", [], [], [*_SWEEP, "--grid", "N=3,4", "--set", "T=8", "--set", "T=9"], "T"),
]

# item 2 (the SDE step limit uses the paper's own Euler step) and item 12 (a huge --paths names paths)
ROWS += [
    ("joma-sde-1e8-steps", [], [],
     ["simulate", "joma", "--sde", "--paths", "4", "--set", "steps=1e8", "--set", "log_every=1e5"], "steps"),
    *[(f"huge-paths-{paper}", [], [], ["simulate", paper, "--sde", "--paths", "1000000000"], "paths")
      for paper in ("scb", "scan-snap", "topic", "joma")],
]

# item 9: a corpus that is not text, or too small for the protocols it feeds, is refused before any work
ROWS += [
    ("corpus-random-bytes", [], [("binary", "c/wiki.test.tokens"), ("write", "c/wiki.valid.tokens", "x y z")],
     ["figures", "topic", "--corpus", "c", "--outdir", "o"], "corpus"),
    ("corpus-3-tokens", [], [("write", "c/wiki.test.tokens", "a b c"), ("write", "c/wiki.valid.tokens", "a b c")],
     ["figures", "topic", "--corpus", "c", "--outdir", "o"], "corpus"),
    ("corpus-3-tokens-reproduce", [], [("write", "c/wiki.test.tokens", "a b c"),
                                       ("write", "c/wiki.valid.tokens", "a b c")],
     ["reproduce", "--corpus", "c"], "corpus"),
]

# item 1: the memory guard covers every variant's arrays (refused before anything is allocated)
ROWS += [
    ("memory-joma-fixed-K", [], [], ["train", "joma", "--set", "K=100000", "--out", "t.nc"], "K"),
    ("memory-joma-ce-K-N", [], [], ["train", "joma", "--variant", "ce", "--set", "K=200000", "--set", "N=200000",
                                    "--out", "t.nc"], "K"),
    ("memory-joma-hier-width", [], [], ["train", "joma", "--variant", "hier", "--set", "width=200000", "--set",
                                        "hidden=200000", "--out", "t.nc"], "width"),
    ("memory-joma-hier-nlayer", [], [], ["train", "joma", "--variant", "hier", "--set", "nlayer=100000"], "nlayer"),
    ("memory-joma-mixture-K", [], [], ["train", "joma", "--variant", "mixture", "--set", "K=3000"], "K"),
    ("memory-joma-hblt-depth", [], [], ["train", "joma", "--variant", "hblt", "--set", "depth=30"], "depth"),
    ("memory-topic-joint-d_a", [], [], ["train", "topic", "--variant", "joint", "--set", "d_a=100000000",
                                        "--out", "t.nc"], "d_a"),
    ("memory-topic-attention-d_a", [], [], ["train", "topic", "--variant", "attention", "--set", "d_a=100000000"],
     "d_a"),
    ("memory-topic-stage1-v", [], [], ["train", "topic", "--set", "v=10000"], "v"),
    ("memory-scan-snap-num_common", [], [], ["train", "scan-snap", "--set", "num_common=100000"], "num_common"),
    ("memory-scb-N", [], [], ["train", "scb", "--set", "N=100000"], "N"),
]

# item 12: the hierarchy's levels are validated by the Config
ROWS += [
    ("joma-hier-num_tokens-zero", [], [], ["train", "joma", "--variant", "hier", "--set", "num_tokens=[8,0]"],
     "num_tokens"),
    ("joma-hier-too-many-subsets", [], [], ["train", "joma", "--variant", "hier", "--set", "num_tokens=[200,4]"],
     "num_tokens"),
    ("joma-hier-combines-too-many", [], [], ["train", "joma", "--variant", "hier", "--set",
                                             "num_combinations=[30,2]"], "num_combinations"),
]

_CHILD = textwrap.dedent(r"""
    import json, os, resource, signal, sys, time
    from pathlib import Path
    from click.testing import CliRunner
    resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))
    from figures.cli import main
    import figures.papers, torch, xarray, h5py  # imports before the clock starts

    def mutate(op, path, *args):
        p = Path(path)
        if op == "write":
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(args[0])
        elif op == "mkdir":
            p.mkdir(parents=True, exist_ok=True)
        elif op == "truncate":  # keep the first fraction of the bytes
            data = p.read_bytes()
            p.write_bytes(data[: int(len(data) * float(args[0]))])
        elif op == "flip":  # invert every byte of the middle half
            data = bytearray(p.read_bytes())
            for i in range(len(data) // 4, 3 * len(data) // 4):
                data[i] ^= 0xFF
            p.write_bytes(bytes(data))
        elif op == "binary":  # bytes that are no UTF-8 text
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(bytes(range(128, 256)) * 8)
        elif op == "empty-dir":
            for q in p.iterdir():
                q.unlink()
        else:
            raise ValueError(op)

    def alarm(*a):
        raise TimeoutError("row took longer than the limit")

    signal.signal(signal.SIGALRM, alarm)
    out = {}
    limit = int(sys.argv[1])
    for job in json.loads(sys.stdin.read()):
        os.chdir(job["tmp"])
        rid = job["rid"]
        try:
            for argv in job["pre"]:
                res = CliRunner().invoke(main, argv)
                assert res.exit_code == 0, (argv, res.output, repr(res.exception))
            for step in job["mutate"]:
                mutate(*step)
        except BaseException as err:
            out[rid] = {"code": -2, "stderr": "", "exc": f"setup failed: {err!r}", "seconds": 0}
            continue
        before = sorted(str(p) for p in Path(".").rglob("*"))
        signal.alarm(limit + 10)
        t0 = time.monotonic()
        try:
            res = CliRunner().invoke(main, job["argv"])
            out[rid] = {"code": res.exit_code, "stderr": res.stderr, "exc": repr(res.exception)}
        except BaseException as err:
            out[rid] = {"code": -1, "stderr": "", "exc": repr(err)}
        signal.alarm(0)
        out[rid]["seconds"] = time.monotonic() - t0
        after = sorted(str(p) for p in Path(".").rglob("*"))
        out[rid]["created"] = sorted(set(after) - set(before))
        out[rid]["removed"] = sorted(set(before) - set(after))
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    """Run every row once in one child process, each in its own empty folder."""
    base = tmp_path_factory.mktemp("adv")
    jobs = []
    for rid, pre, steps, argv, _ in ROWS:
        tmp = base / rid
        tmp.mkdir()
        fmt = (lambda a: a.replace("{tmp}", str(tmp)) if isinstance(a, str) else a)
        jobs.append({"rid": rid, "tmp": str(tmp), "pre": [[fmt(a) for a in p] for p in pre],
                     "mutate": [[fmt(a) for a in s] for s in steps], "argv": [fmt(a) for a in argv]})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(ROW_SECONDS)], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env, timeout=900, cwd=base)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("rid, field", [(r[0], r[4]) for r in ROWS], ids=[r[0] for r in ROWS])
def test_hostile_case_is_one_line_exit_2_nothing_written_no_hang(table, rid, field):
    res = table[rid]
    lines = [ln for ln in res["stderr"].splitlines() if ln.strip()]
    assert res["code"] == 2, res
    assert len(lines) == 1 and res["stderr"].count("\n") == 1, res["stderr"]
    assert lines[0].startswith(f"error: {field}: "), lines[0]
    assert res["created"] == [] and res["removed"] == [], res
    assert res["seconds"] < ROW_SECONDS, res


# ------------------------------------------------------------------------------------------------
# item 6: the store trusts a cell only when it opens and matches its key
# ------------------------------------------------------------------------------------------------
LINE = "helpers.sweep_cells:line"


@pytest.fixture
def _helpers(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def _damage(path: Path, how: str, other: Path | None = None) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(bytes(range(256)) * 8)
    elif how == "other-cell":  # a valid file of another cell under this key's name
        path.write_bytes(other.read_bytes())


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "other-cell"])
def test_damaged_cell_is_recomputed_with_a_warning(_helpers, tmp_path, how):
    import numpy as np

    from empirical.sweeps import cell_problem, grid_cells, open_sweep, run_cells
    from theory.errors import TdynWarning

    store = tmp_path / "st"
    cells = grid_cells("toy", {"x": 0.0}, {"x": [1.0, 2.0, 3.0]})
    run_cells(LINE, cells, store)
    victim = store / "cells" / f"{cells[1].key}.nc"
    _damage(victim, how, other=store / "cells" / f"{cells[0].key}.nc")
    assert cell_problem(victim, cells[1].key) is not None
    untouched = {c.key: (store / "cells" / f"{c.key}.nc").stat().st_mtime_ns for c in (cells[0], cells[2])}
    computed = []
    with pytest.warns(TdynWarning, match=rf"^store: cell .*{cells[1].key}\.nc is damaged .*; recomputing it$"):
        idx = run_cells(LINE, cells, store, progress=lambda *a: computed.append(a[0]))
    assert computed == [cells[1].key]  # only the damaged cell ran again
    assert set(idx["status"]) == {"ok"}
    assert cell_problem(victim, cells[1].key) is None
    assert {k: (store / "cells" / f"{k}.nc").stat().st_mtime_ns for k in untouched} == untouched
    ds = open_sweep(store)
    np.testing.assert_array_equal(ds["y"].values, np.outer([1.0, 2.0, 3.0], np.arange(5.0)))


def test_open_sweep_names_a_damaged_cell_in_one_line(_helpers, tmp_path):
    from empirical.sweeps import grid_cells, open_sweep, run_cells
    from theory.errors import ConfigError

    store = tmp_path / "st"
    cells = grid_cells("toy", {"x": 0.0}, {"x": [1.0, 2.0]})
    run_cells(LINE, cells, store)
    _damage(store / "cells" / f"{cells[0].key}.nc", "truncated")
    with pytest.raises(ConfigError, match=r"^store: cell .* is damaged .*rerun the sweep") as err:
        open_sweep(store)
    assert "\n" not in str(err.value)


def test_cli_sweep_rerun_recomputes_a_truncated_cell(tmp_path, monkeypatch):
    """``tdyn sweep`` after truncating one cell: one ``warning: store: ...`` line, the cell
    recomputed (2/2 done, exit 0), the same numbers as before."""
    from click.testing import CliRunner

    from empirical.sweeps import open_sweep, read_index
    from figures.cli import main

    monkeypatch.chdir(tmp_path)
    argv = ["sweep", "scb", "--kind", "ode", "--backend", "scipy", "--grid", "steps=50,60", "--store", "S",
            "--no-progress"]
    res = CliRunner().invoke(main, argv)
    assert res.exit_code == 0, res.output
    first = open_sweep("S")["zeta"].values
    key = read_index("S")["key"].iloc[1]
    _damage(Path("S") / "cells" / f"{key}.nc", "truncated")
    res = CliRunner().invoke(main, argv)
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"warning: store: cell S/cells/{key}.nc is damaged"), res.stderr
    assert "2/2 cells done" in res.stdout
    import numpy as np

    np.testing.assert_array_equal(open_sweep("S")["zeta"].values, first)


# ------------------------------------------------------------------------------------------------
# item 3: a long target name never breaks the atomic write's temporary name
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["y" * 252 + ".nc", "é" * 126 + ".nc"])
def test_atomic_write_of_a_255_byte_name(tmp_path, name):
    from simulate.trajectory import atomic_write

    assert len(os.fsencode(name)) == 255
    out = atomic_write(tmp_path / name, lambda tmp: Path(tmp).write_text("ok"))
    assert out.read_text() == "ok" and [p.name for p in tmp_path.iterdir()] == [name]


def test_check_path_accepts_what_fits_and_names_the_field():
    from figures.validation import check_path
    from theory.errors import ConfigError

    assert check_path("out", "y" * 244 + ".nc", derived=(".partial.nc",)).name == "y" * 244 + ".nc"
    with pytest.raises(ConfigError, match=r"^out: .* leaves no room for its \.partial\.nc file .* at most 247 bytes$"):
        check_path("out", "y" * 245 + ".nc", derived=(".partial.nc",))
    with pytest.raises(ConfigError, match=r"^store: the name .* is 256 bytes; the file system allows 255$"):
        check_path("store", "a/" + "z" * 256 + "/b")


# ------------------------------------------------------------------------------------------------
# item 4: the Trainer itself refuses a damaged checkpoint in one line (library callers too)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_trainer_resume_from_a_damaged_checkpoint_is_a_config_error(tmp_path, how):
    from empirical import scb as escb
    from empirical.trainer import checkpoint_problem
    from theory.errors import ConfigError
    from theory.scb import SCBConfig

    cfg = SCBConfig(T=8, steps=10, batch=8, log_every=5)
    escb.train(cfg, device="cpu", checkpoint=tmp_path, checkpoint_every=5)
    state = tmp_path / "checkpoint.pt"
    assert checkpoint_problem(state) is None
    data = bytearray(state.read_bytes())
    if how == "truncated":
        data = data[: len(data) - 100]
    else:
        for i in range(len(data) // 3, len(data) // 3 + 64):
            data[i] ^= 0xFF
    state.write_bytes(bytes(data))
    assert checkpoint_problem(state) is not None
    with pytest.raises(ConfigError, match=r"^resume: checkpoint .*checkpoint\.pt is damaged \(") as err:
        escb.train(cfg, device="cpu", checkpoint=tmp_path, resume=True)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------------
# item 10: --set parsing (hypothesis): every value given is applied, a repeated key is refused
# ------------------------------------------------------------------------------------------------


def _scb_fields():
    import dataclasses

    from theory.scb import SCBConfig

    cfg = SCBConfig()
    return cfg, [f.name for f in dataclasses.fields(cfg)]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_set_parsing_applies_every_key_once_and_refuses_a_repeat(data):
    from theory.errors import ConfigError

    cfg, names = _scb_fields()
    keys = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=6))
    spaces = data.draw(st.lists(st.sampled_from(["", " "]), min_size=len(keys), max_size=len(keys)))
    items = [f"{sp}{k}{sp}={sp}{getattr(cfg, k)!r}" for k, sp in zip(keys, spaces)]
    repeated = [k for i, k in enumerate(keys) if k in keys[:i]]
    if repeated:
        with pytest.raises(ConfigError) as err:
            cfg.with_overrides(items)
        assert err.value.field == repeated[0] and "set twice" in err.value.message
    else:
        got = cfg.with_overrides(items)
        assert got == cfg  # the values given (the defaults) are the values kept
        assert cfg.with_overrides(list(reversed(items))) == got  # order does not matter without repeats


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(min_value=2, max_value=6), min_size=1, max_size=4),
       extra=st.lists(st.integers(min_value=2, max_value=6), max_size=2))
def test_grid_parsing_keeps_every_value_or_names_the_field(values, extra):
    from figures.papers import get
    from figures.sweep import parse_grid
    from theory.errors import ConfigError

    specs = [f"N={','.join(map(str, values))}"] + ([f"N={','.join(map(str, extra))}"] if extra else [])
    if extra or len(set(values)) < len(values):
        with pytest.raises(ConfigError) as err:
            parse_grid(get("scb"), specs)
        assert err.value.field == "N"
    else:
        assert parse_grid(get("scb"), specs) == {"N": values}


# ------------------------------------------------------------------------------------------------
# item 2 / item 12: the shared estimator counts Euler steps of one optimiser step each, and names
# paths when the ensemble (not one path) is what exceeds a limit (hypothesis)
# ------------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(steps=st.integers(min_value=1, max_value=10**9), lr=st.floats(min_value=1e-6, max_value=1e3),
       paths=st.integers(min_value=1, max_value=10**6))
def test_sde_estimate_counts_one_euler_step_per_optimiser_step(steps, lr, paths):
    import dataclasses

    from theory.errors import ConfigError
    from theory.joma import JomaConfig
    from theory.limits import LIMITS, check, estimate

    cfg = dataclasses.replace(JomaConfig(), steps=steps, log_every=max(1, steps // 10), lr=lr)
    est = estimate("joma", cfg, "sde", paths=paths)
    n = sum(t.amount for t in est["sde_steps"])
    assert n == pytest.approx(steps, rel=1e-9)  # independent of lr: dt = lr = one optimiser step
    assert sum(t.amount for t in est["sde_path_steps"]) == pytest.approx(steps * paths, rel=1e-9)
    limits = {"memory": float("inf")}
    try:
        check("joma", cfg, "sde", paths=paths, limits=limits)
    except ConfigError as err:
        one = steps <= LIMITS["sde_steps"] and steps <= LIMITS["sde_path_steps"]
        assert err.field == ("paths" if one else "steps"), (err, steps, paths)
    else:
        assert steps <= LIMITS["sde_steps"] and steps * paths <= LIMITS["sde_path_steps"]


# ------------------------------------------------------------------------------------------------
# item 12 (and part of 7): an interrupted sweep says so in one line (no blank line before it), with
# the signal's exit code — also when the Trainer deferred the signal to the end of a step
# ------------------------------------------------------------------------------------------------
def test_interrupted_sweep_is_one_line_with_the_signals_exit_code(tmp_path):
    """SIGINT -> exit 130, SIGTERM -> 143 (the Trainer defers both to the end of a step), each one
    line (``interrupted: ...``; ``error: interrupted: ...`` for SIGTERM) within 10 s of the signal;
    both sweeps run at once."""
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    cases = {2: (130, "interrupted: stopped by Ctrl-C"), 15: (143, "error: interrupted: stopped by SIGTERM")}
    procs = {}
    for sig in cases:
        (tmp_path / str(sig)).mkdir()
        procs[sig] = subprocess.Popen(
            [sys.executable, "-m", "figures", "sweep", "scb", "--grid", "seed=0,1", "--set", "steps=10000000",
             "--set", "log_every=1000000", "--store", "S", "--no-progress"],
            cwd=tmp_path / str(sig), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=user_terminal)
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / str(sig) / "S" / "index.csv").exists() for sig in cases):  # cells about to run
            assert all(p.poll() is None for p in procs.values()) and time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)  # inside the first cell's training steps
        t0 = time.monotonic()
        for sig, p in procs.items():
            p.send_signal(sig)
        results = {sig: p.communicate(timeout=60) for sig, p in procs.items()}
        elapsed = time.monotonic() - t0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    assert elapsed < 10, "not stopped within 10 s of the signal"
    for sig, (code, word) in cases.items():
        err = results[sig][1]
        assert procs[sig].returncode == code, (sig, err)
        assert err.count("\n") == 1 and err.startswith(word), repr(err)  # the user's own Ctrl-C is no error


# ------------------------------------------------------------------------------------------------
# item 12: two sweeps on one store compute each cell once (a lock per cell)
# ------------------------------------------------------------------------------------------------
_TWO_SWEEPS = textwrap.dedent(r"""
    import sys, time
    from pathlib import Path
    from empirical.sweeps import grid_cells, run_cells
    store, log, me = sys.argv[1], sys.argv[2], sys.argv[3]
    cells = grid_cells("toy", {"x": 0.0}, {"x": [1.0, 2.0, 3.0]}, options={"log": log, "seconds": 0.3})
    Path(store).parent.joinpath(f"ready-{me}").write_text("1")
    while not Path(store).parent.joinpath("go").exists():
        time.sleep(0.02)
    idx = run_cells("helpers.adversarial_cells:counted", cells, store)
    print(sorted(idx["status"]))
""")


def test_two_sweeps_on_one_store_compute_each_cell_once(tmp_path):
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)]), "JAX_PLATFORMS": "cpu"}
    store, log = tmp_path / "S", tmp_path / "computed.log"
    procs = [subprocess.Popen([sys.executable, "-c", _TWO_SWEEPS, str(store), str(log), str(i)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready-{i}").exists() for i in range(2)):
            assert all(p.poll() is None for p in procs) and time.monotonic() < deadline
            time.sleep(0.05)
        (tmp_path / "go").write_text("1")
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), outs
    assert all(o[0].strip() == "['ok', 'ok', 'ok']" for o in outs), outs
    computed = sorted(line.split()[0] for line in log.read_text().splitlines())
    assert computed == ["1.0", "2.0", "3.0"]  # each cell once, by one of the two sweeps


# ------------------------------------------------------------------------------------------------
# item 5: a disk that refuses the write keeps the finished result elsewhere and says where
# ------------------------------------------------------------------------------------------------
def _line(n=5):
    import numpy as np

    from simulate.trajectory import make_trajectory

    t = np.arange(float(n))
    return make_trajectory(t, {"y": 2 * t}, paper="toy", system="line", source="test")


def test_save_or_rescue_writes_the_result_elsewhere_and_says_where(tmp_path):
    import xarray as xr

    from simulate.trajectory import WriteFailed, load, save_or_rescue

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")  # writing "into" it fails with an OSError, as a full disk does
    rescue = tmp_path / "rescue"
    rescue.mkdir()
    ds = _line()
    with pytest.raises(WriteFailed) as err:
        save_or_rescue(ds, blocker / "run.nc", fallbacks=[tmp_path / "missing", rescue])
    got = err.value.rescued
    assert got is not None and got.parent.parent == rescue and got.name == "run.nc"
    assert str(err.value) == f"out: cannot write {blocker / 'run.nc'} (Not a directory); the result was written to {got} instead"
    xr.testing.assert_identical(load(got), ds)
    # nowhere takes it: said so, and nothing is left behind
    with pytest.raises(WriteFailed, match=r"^out: cannot write .* the result is lost: no room in ") as err:
        save_or_rescue(ds, blocker / "run.nc", fallbacks=[blocker])
    assert err.value.rescued is None and sorted(p.name for p in tmp_path.iterdir()) == ["not-a-dir", "rescue"]


_FULL_DISK = textwrap.dedent(r"""
    import os, resource, signal, sys
    from click.testing import CliRunner
    from figures.cli import main
    import figures.papers, h5py, xarray  # imported before the limit
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))  # every file of this process, as a full disk
    res = CliRunner().invoke(main, sys.argv[1:])
    sys.stdout.write(f"CODE {res.exit_code}\n")
    sys.stderr.write(res.stderr)
""")


def test_cli_out_on_a_refusing_disk_is_one_line_and_no_crash(tmp_path):
    """``simulate --out`` where every write past 16 KiB fails (RLIMIT_FSIZE, EFBIG): one line naming
    ``out`` and where the result went (here nowhere: the limit is everywhere), exit 2, no segfault,
    no temporary file left."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg",
           "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run([sys.executable, "-c", _FULL_DISK, "simulate", "scb", "--backend", "scipy", "--out", "x.nc"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]  # the child itself exited normally (no segfault)
    assert "CODE 2" in proc.stdout, proc.stdout[-500:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: out: cannot write x.nc (File too large); "), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"] and list((tmp_path / "tmp").iterdir()) == []


# ------------------------------------------------------------------------------------------------
# item 7: SIGTERM to `sweep --workers 2` stops at once: no queued cell starts, the running ones
# stop, the index is true (the finished cell ok), exit 143 in one line
# ------------------------------------------------------------------------------------------------
def test_sigterm_stops_a_parallel_sweep_at_once_with_a_true_index(tmp_path):
    import time

    import pandas as pd

    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "figures", "sweep", "scb", "--workers", "2", "--grid",
         "steps=20,10000000,10000001,10000002", "--set", "log_every=10", "--store", "S", "--no-progress"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=user_terminal)
    index = tmp_path / "S" / "index.csv"
    try:
        deadline = time.monotonic() + 180
        while not (index.exists() and "ok" in set(pd.read_csv(index)["status"])):  # the short cell finished
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(1.0)  # the long cells are training
        t0 = time.monotonic()
        proc.send_signal(15)
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert elapsed < 10, f"stopped {elapsed:.0f} s after SIGTERM"
    assert proc.returncode == 143 and err.count("\n") == 1 and err.startswith("error: interrupted: stopped by SIGTERM"), err
    assert out.strip().splitlines()[-1] == "1/4 cells done in S/index.csv", out  # what finished, said
    idx = pd.read_csv(index, keep_default_na=False)
    status = dict(zip(idx["steps"], idx["status"]))
    # the running cells keep their partial trajectories (unless a worker was past its grace and killed:
    # then nothing of it, never half a file); the queued one never started
    # the queued one may have started once the short cell freed its worker: never "ok", never "failed"
    assert status[20] == "ok", status
    assert {status[10000000], status[10000001], status[10000002]} <= {"interrupted", "pending"}, status
    import xarray as xr

    from empirical.sweeps import cell_problem, partial_path

    for key, st in zip(idx["key"], idx["status"]):
        kept = partial_path(tmp_path / "S", key)
        assert kept.is_file() == (st == "interrupted"), (key, st)
        if st == "interrupted":
            assert cell_problem(kept, key) is not None  # never taken for the finished cell
            xr_ds = xr.load_dataset(kept, engine="h5netcdf")
            assert xr_ds.attrs["sweep_partial_of"] == key and xr_ds.sizes["time"] >= 1


# ------------------------------------------------------------------------------------------------
# item 8: Ray addresses that are not Ray are refused in one line within seconds, before any file
# ------------------------------------------------------------------------------------------------
@pytest.fixture
def fake_servers():
    """``{"http": port, "silent": port, "closing": port}``: a web server, a port that accepts and
    never answers, one that accepts and closes — none of them Ray."""
    import socket
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections wait in the backlog: accepted by the kernel, never answered
    closing = socket.socket()
    closing.bind(("127.0.0.1", 0))
    closing.listen(8)
    stop = threading.Event()

    def close_them():
        closing.settimeout(0.1)
        while not stop.is_set():
            try:
                c, _ = closing.accept()
                c.close()
            except OSError:
                pass

    threading.Thread(target=close_them, daemon=True).start()
    yield {"http": http.server_address[1], "silent": silent.getsockname()[1], "closing": closing.getsockname()[1]}
    stop.set()
    http.shutdown()
    silent.close()
    closing.close()


@pytest.mark.parametrize("kind, words", [("http", "is not a Ray server"), ("silent", "does not answer as Ray does"),
                                         ("closing", "is not a Ray server|Connection reset|Broken pipe")])
def test_a_port_that_is_not_ray_is_refused_in_one_line_before_anything(tmp_path, fake_servers, kind, words):
    import time

    from click.testing import CliRunner

    from figures.cli import main

    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["sweep", "scb", "--kind", "ode", "--grid", "steps=50,60", "--store",
                                    str(tmp_path / "S"), "--ray", f"127.0.0.1:{fake_servers[kind]}"])
    assert time.monotonic() - t0 < 10
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    import re

    assert lines[0].startswith("error: ray: ") and f"127.0.0.1:{fake_servers[kind]} " in lines[0], lines[0]
    assert re.search(words, lines[0]), lines[0]
    assert list(tmp_path.iterdir()) == []


def test_ray_auto_with_a_stale_cluster_file_is_refused(tmp_path, fake_servers, monkeypatch):
    """``--ray auto`` resolves through the cluster file ``ray start`` leaves behind; one naming a
    port that is no Ray head is refused in seconds (``RAY_TMPDIR`` points Ray and tdyn at a
    private folder)."""
    from empirical.sweeps import check_ray_address, ray_cluster_file
    from theory.errors import ConfigError

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    (tmp_path / "ray").mkdir()
    ray_cluster_file().write_text(f"127.0.0.1:{fake_servers['silent']}")
    with pytest.raises(ConfigError, match=r"^ray: --ray auto resolves to 127\.0\.0\.1:\d+ \(from .*ray_current_cluster\): "):
        check_ray_address("auto", timeout=1.0)


def test_sigterm_to_reproduce_jobs_stops_the_paper_processes_at_once(monkeypatch, tmp_path, request):
    """``tdyn reproduce --jobs 2`` on SIGTERM: the running papers' processes get the signal at once
    (no paper waits for the others), no queued paper starts, one line, exit 143."""
    import signal
    import threading
    import time

    # SIGTERM's default action, as at a terminal (a background runner may start the suite with it ignored)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    request.addfinalizer(lambda: signal.signal(signal.SIGTERM, previous))

    from click.testing import CliRunner

    from figures import context as core
    from figures.cli import main

    started, signalled = [], []
    first = threading.Event()

    class Pipe:  # the process's stdout / stderr: nothing until the process ends
        def __init__(self, done):
            self.done = done

        def read(self):
            self.done.wait(60)
            return ""

        def __iter__(self):
            self.done.wait(60)
            return iter(())

    class SlowPopen:  # a paper's `tdyn figures P` that runs until it is signalled
        def __init__(self, cmd, **kw):
            self.args, self.returncode = cmd, None
            self.paper = cmd[cmd.index("figures", 3) + 1]
            self._done = threading.Event()
            self.stdout = self.stderr = Pipe(self._done)
            started.append(self.paper)
            first.set()

        def send_signal(self, sig):
            signalled.append((self.paper, sig))
            self.returncode = -sig
            self._done.set()

        def wait(self, timeout=None):
            self._done.wait(timeout)
            return self.returncode

        def kill(self):
            self.send_signal(signal.SIGKILL)

    monkeypatch.setattr(subprocess, "Popen", SlowPopen)
    monkeypatch.setattr(core, "OUT_DIR", tmp_path)

    def terminate_when_running():
        first.wait(60)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_when_running, daemon=True).start()
    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["reproduce", "--quick", "--jobs", "2", "--device", "cpu", "--no-progress"])
    assert time.monotonic() - t0 < 10
    assert res.exit_code == 143, res.output
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: interrupted: stopped by SIGTERM"), res.stderr
    assert len(started) == 2 and sorted(signalled) == sorted((p, signal.SIGTERM) for p in started)


# ------------------------------------------------------------------------------------------------
# item 7: a sweep stopped by SIGTERM (one worker, the topic paper) exits 143 and its running cell
# keeps its partial trajectory, which the index names; item 12: a double Ctrl-C to train is one
# line and exit 130 (not killed by the second signal)
# ------------------------------------------------------------------------------------------------
def _stop(argv, cwd, signals, ready, gap=0.3):
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "figures", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=user_terminal)
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        time.sleep(1.5)  # inside the training steps
        t0 = time.monotonic()
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(gap)
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_to_a_one_worker_sweep_keeps_the_running_cells_partial(tmp_path):
    import pandas as pd
    import xarray as xr

    from empirical.sweeps import partial_path

    code, out, err, elapsed = _stop(
        ["sweep", "topic", "--grid", "seed=0,1", "--set", "steps=10000000", "--set", "log_every=1000000",
         "--store", "S", "--no-progress"], tmp_path, [15], lambda: (tmp_path / "S" / "index.csv").exists())
    assert elapsed < 10 and code == 143, (code, err)
    assert err.count("\n") == 1 and err.startswith("error: interrupted: stopped by SIGTERM"), repr(err)
    idx = pd.read_csv(tmp_path / "S" / "index.csv", keep_default_na=False)
    assert sorted(idx["status"]) == ["interrupted", "pending"]
    key = idx.loc[idx["status"] == "interrupted", "key"].iloc[0]
    kept = xr.load_dataset(partial_path(tmp_path / "S", key), engine="h5netcdf")
    assert kept.attrs["sweep_partial_of"] == key and kept.sizes["time"] >= 1 and int(kept["step"][0]) == 0
    assert not (tmp_path / "S" / "cells" / f"{key}.nc").exists()  # never taken for the finished cell


def test_double_ctrl_c_to_train_is_one_line_and_exit_130(tmp_path):
    import time

    code, out, err, elapsed = _stop(
        ["train", "scb", "--set", "steps=10000000", "--set", "log_every=1000000", "--out", "t.nc", "--no-progress"],
        tmp_path, [2, 2], lambda start=time.monotonic(): time.monotonic() - start > 10)  # imports done, training
    assert elapsed < 10 and code == 130, (code, err)
    assert err.count("\n") == 1 and err.startswith("interrupted: stopped by Ctrl-C"), repr(err)


# ------------------------------------------------------------------------------------------------
# item 9: the corpus check is each protocol's own (streams; the topic paper's LDA inputs)
# ------------------------------------------------------------------------------------------------
def test_corpus_check_names_what_the_protocols_lack(tmp_path):
    from figures.realtext import check_corpus_fits
    from theory.errors import ConfigError

    def corpus(name, train, valid):
        (tmp_path / name).mkdir()
        (tmp_path / name / "wiki.test.tokens").write_text(train)
        (tmp_path / name / "wiki.valid.tokens").write_text(valid)
        return str(tmp_path / name)

    words = " ".join(f"w{i}" for i in range(40))  # no word of >= 3 letters: nothing for LDA
    plenty = "\n".join([words] * 2000)
    with pytest.raises(ConfigError, match=r"^corpus: .*: 3 training tokens; the runs need at least \d+"):
        check_corpus_fits(corpus("tiny", "a b c", plenty), quick=True)
    with pytest.raises(ConfigError, match=r"^corpus: .*: 3 validation tokens"):
        check_corpus_fits(corpus("tiny-valid", plenty, "a b c"), quick=True)
    with pytest.raises(ConfigError, match=r"^corpus: no word for the LDA topics"):
        check_corpus_fits(corpus("no-lda-words", plenty, plenty), quick=True)
    short_lines = "\n".join(["alpha beta gamma delta"] * 20000)  # paragraphs of 4 tokens < min_doc_tokens
    with pytest.raises(ConfigError, match=r"^corpus: no training paragraph of >= 20 tokens"):
        check_corpus_fits(corpus("short-paragraphs", short_lines, short_lines), quick=True)


def test_ctrl_c_to_simulate_is_one_line_and_exit_130(tmp_path):
    """Item 12: no blank line before ``error: interrupted`` on a pipe; nothing half-written; the SDE
    engine stops within one time segment (a compiled call of about a second), not at the horizon."""
    import time

    code, out, err, elapsed = _stop(
        ["simulate", "scb", "--sde", "--paths", "64", "--set", "steps=3000000", "--set", "log_every=1000",
         "--out", "t.nc"], tmp_path, [2], lambda start=time.monotonic(): time.monotonic() - start > 10)
    assert elapsed < 10 and code == 130, (code, err)
    assert err.count("\n") == 1 and err.startswith("interrupted: stopped by Ctrl-C"), repr(err)
    assert not list(tmp_path.glob("*.nc"))


@pytest.mark.parametrize("sig,code,line", [(2, 130, "interrupted: stopped by Ctrl-C"),
                                           (15, 143, "error: interrupted: stopped by SIGTERM")])
def test_a_signal_while_the_command_imports_is_one_line(tmp_path, sig, code, line):
    """A Ctrl-C or SIGTERM in the command's first fraction of a second (its modules still importing,
    before the CLI's own handler) is the same one line and exit code, never a traceback
    (:mod:`figures._console`)."""
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "figures", "figures", "scb", "--quick", "--outdir", "o"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=user_terminal)
    time.sleep(0.15)  # the interpreter is up; tdyn's modules are importing
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code and err.count("\n") == 1 and err.startswith(line), (proc.returncode, err)
