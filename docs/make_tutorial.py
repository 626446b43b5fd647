"""Writes docs/tutorial.ipynb from the cells below (run: python docs/make_tutorial.py).

The notebook is executed by `make test` (tests/test_tutorial.py), at small sizes, so it cannot rot.
Edit the cells here, not the .ipynb: the test also checks that the notebook is this script's output.
Each code cell names what it shows (``SHOWS``: ``"figure"`` an inline PNG, ``"table"`` an HTML table,
``"text"`` printed or returned text); the test holds every executed cell to it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

#: what a code cell's output must hold (tests/test_tutorial.py): figure -> image/png, table -> an HTML table
SHOWS = ("figure", "table", "text")

#: ``(kind, source)`` for markdown, ``("code", source, shows)`` for code
CELLS: list[tuple[str, ...]] = [
    ("md", """# tdyn tutorial: from a paper's loss to a verdict

This notebook walks one paper (SCB, sparse contextual bigrams) through tdyn's chain — derive the
reduced equations from the loss, export them, solve them as an ODE and an SDE, train the real
network, overlay theory and practice — then reads a paper's claims and adds a tiny paper of your own.
Sizes are small so that it runs in about a minute on a laptop CPU (`make test` executes it)."""),
    ("code", """%matplotlib inline
import json, tempfile
from pathlib import Path

import numpy as np

import simulate
from figures.papers import get
from theory import load_system

row = get("scb")                                   # one row of the paper table
cfg = row.make_config(["steps=120", "log_every=10", "batch=512"])   # the Config owns every setting and time
cfg.ode_times()[:5]""", "text"),
    ("md", """## 1. Derive

Every system is derived by sympy from the paper's loss (never typed in). `tdyn derive scb` prints the
same systems; `--format latex` gives an `align` environment you can paste into a paper."""),
    ("code", """systems = row.slot("systems")(cfg)
S = next(s for s in systems if s.name == "symmetric")
print(S.state_names, S.parameter_names)
print(S.to_latex()[:400])""", "text"),
    ("md", """## 2. Export and read back

JSON round-trips: `load_system` reads a one-system document, or a many-system document and a name."""),
    ("code", """from theory import systems_to_json

doc = systems_to_json("scb", systems)            # the `tdyn derive scb --format json` document
path = Path(tempfile.mkdtemp()) / "scb.json"
path.write_text(doc)
back = load_system(path, "symmetric")
assert back.equivalent(S)
back.name, len(json.loads(doc)["systems"])""", "text"),
    ("md", """## 3. Solve: ODE (two backends that agree) and SDE (minibatch noise)

`row.slot("problem")(cfg)` is the system with its parameters, initial state and the config's time grid."""),
    ("code", """problem = row.slot("problem")(cfg)
ode = simulate.solve(problem, backend="scipy")
ode_jax = simulate.solve(problem, backend="diffrax")
name = "value_transition_correlation"
print("max |diffrax - scipy|:", float(np.max(np.abs(ode[name].values - ode_jax[name].values))))
model, t = row.slot("sde")(cfg)                    # the SDE slot: a model and config.ode_times()
ens = simulate.solve_sde(model, t, paths=64, seed=0)
dict(ens.sizes)""", "text"),
    ("md", """## 4. Train the real network, logged under the same observable names"""),
    ("code", """trained = row.slot("train")(cfg, device="cpu", progress=False)
np.testing.assert_array_equal(trained["time"].values, ode["time"].values)   # one time grid
from figures.core import agreement
agreement(ode, trained, [name])""", "text"),
    ("md", """## 5. Overlay theory and practice

The shared overlay draws the ODE, the SDE band and the trained runs in one style (labels from the
derivation's symbols)."""),
    ("code", """from figures.core import overlay

fig = overlay(ode, trained, [name], sde=ens if name in ens else None, system=S)
fig                                                  # shown inline""", "figure"),
    ("md", """## 6. Read a paper's claims

Each claim is decided over seeds with a confidence interval, inside the regime the paper assumes, with
a validity map. The registry (`figures/scb/claims.toml`) states each claim, the regime it assumes, the
statistic measured over seeds and the criterion it must meet; `tdyn claims scb --quick` decides them
(`--format latex` gives a booktabs table with the verdicts)."""),
    ("code", """import pandas as pd

from figures.scb.claims import claims

pd.set_option("display.max_colwidth", 90)
pd.DataFrame([{"claim": c.name, "statement": c.statement, "regime": c.regime_text(),
               "statistic": c.statistic.name, "holds when": c.criterion.describe()}
              for c in claims.registry().claims]).set_index("claim")""", "table"),
    ("md", """## 7. Add a tiny paper

A paper is three packages (theory/, empirical/, figures/) and one row. Here the whole paper lives in this
notebook: one logit fitted by cross-entropy to Bernoulli(p) labels; the flow is derived from the loss."""),
    ("code", """from dataclasses import dataclass

import sympy as sp
import torch

from empirical.trainer import ModuleState, Trainer
from figures.context import RunContext
from figures.papers import PAPERS, Paper, register
from figures.report import Observable, Report
from theory import ConfigError, ParamsBase, Problem, ReducedSystem

a, p, lr = sp.symbols("a p lr", real=True)


@dataclass(frozen=True)
class NoteConfig(ParamsBase):
    p: float = 0.8
    lr: float = 0.5
    batch: int = 256
    steps: int = 200
    log_every: int = 10
    seed: int = 0

    def validate(self):
        if not 0 < self.p < 1:
            raise ConfigError("p", f"must lie in (0, 1), got {self.p}")

    def ode_time(self, step):          # time unit: one optimiser step (lr is inside the flow)
        return float(step)


def systems(config=None):
    s = 1 / (1 + sp.exp(-a))
    loss = -p * sp.log(s) - (1 - p) * sp.log(1 - s)
    return [ReducedSystem(name="logit", paper="note", state=(a,), parameters=(p, lr),
                          rhs=(sp.simplify(-lr * sp.diff(loss, a)),), observables={"prob": s})]


def problem(config):
    return Problem(systems()[0], {"p": config.p, "lr": config.lr}, {"a": 0.0}, config.ode_times(), config=config)


class Logit(ModuleState):
    paper, name = "note", "logit"

    def __init__(self, config):
        self.config = config

    def setup(self, device, generator):
        self.gen, self.model = generator, torch.nn.Linear(1, 1, bias=False, dtype=torch.float64)
        torch.nn.init.zeros_(self.model.weight)

    def step(self, step):
        y = (torch.rand(self.config.batch, generator=self.gen, dtype=torch.float64) < self.config.p).double()
        logit = self.model(torch.ones(self.config.batch, 1, dtype=torch.float64)).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y)
        loss.backward()
        with torch.no_grad():
            self.model.weight -= self.config.lr * self.model.weight.grad
            self.model.weight.grad = None
        return {"loss": float(loss.detach())}

    def observables(self):
        w = float(self.model.weight.detach())
        return {"a": w, "prob": 1 / (1 + np.exp(-w))}


def train(config, *, device="cpu", variant=None, progress=False, checkpoint=None, checkpoint_every=None, resume=False):
    return Trainer(device=device, progress=progress).run(Logit(config))


def compare(ctx=None, *, quick=None, device=None):  # ctx: the run's figures.context.RunContext
    cfg = NoteConfig()
    ode, run = simulate.solve(problem(cfg), backend="scipy"), train(cfg)
    return Report("note", "p=0.8, lr=0.5, batch 256", [Observable("prob", agreement(ode, run, ["prob"])["prob"], 0.05)])


register(Paper(name="note", title="one logit", spec="this notebook", config=NoteConfig, systems=systems,
               problem=problem, train=train, compare=compare, figures=(),
               missing={"sde": "not in this example", "estimate": "one logit", "text": "no real text",
                        "claims": "see docs/claims.md for a registry"}))
report = get("note").slot("compare")(RunContext(quick=True, device="cpu"))
print(report.table())
PAPERS.pop("note");""", "text"),
    ("md", """That is the whole contract: a Config that owns time, systems derived from the loss, a problem, an
experiment the Trainer runs, and a compare report. `docs/adding-a-paper.md` lists every slot (SDE,
claims registry, figures, real text, resource estimates) and `tests/tiny/` is the same paper laid out
as three packages."""),
]


def build() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = []
    for kind, src, *shows in CELLS:
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(src))
        else:
            assert shows and shows[0] in SHOWS, f"a code cell names what it shows: {src[:60]!r}"
            nb.cells.append(nbformat.v4.new_code_cell(src, metadata={"tdyn": {"shows": shows[0]}}))
    return nb


if __name__ == "__main__":
    out = Path(__file__).with_name("tutorial.ipynb")
    nbformat.write(build(), out)
    print(f"wrote {out}")
