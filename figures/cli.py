"""The ``tdyn`` command. Thin: parse, call one library function, print; user errors -> one line
``error: <field>: <message>`` on stderr and exit code 2.

Papers plug in by convention (``scan-snap`` -> module name ``scan_snap``), with no registry to edit:

* ``theory.<mod>``: ``Config`` (a ParamsBase dataclass), ``systems(config)``,
  ``default_run(config) -> {"system", "params", "y0", "t"[, "solve_options": {backend: kwargs}]}``,
  optionally ``minibatch_sde(config)``;
* ``empirical.<mod>``: ``run(config, *, device, variant, progress) -> Trajectory``;
* ``figures.<mod>``: ``compare(quick, device) -> dict`` (``{"paper", "regime", "observables":
  {name: {"rel_l2"}}, "passed"}``) and ``make_figures(outdir, quick) -> list[Path]``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import click

from theory.errors import ConfigError, DivergenceError, SolverError, TdynError

PAPERS = ("scb", "scan-snap", "topic", "joma")


def module_name(paper: str) -> str:
    return paper.replace("-", "_")


def available_papers() -> list[str]:
    """Papers whose figures module exists (the whole chain is present)."""
    return [p for p in PAPERS if importlib.util.find_spec(f"figures.{module_name(p)}") is not None]


def stage(paper: str, stage_name: str):
    if paper not in PAPERS:
        raise ConfigError("paper", f"unknown paper {paper!r}; known: {', '.join(PAPERS)}")
    name = f"{stage_name}.{module_name(paper)}"
    if importlib.util.find_spec(name) is None:
        raise ConfigError("paper", f"{paper}: the {stage_name} stage is not implemented yet")
    return importlib.import_module(name)


def _config(paper: str, assignments):
    cfg_cls = stage(paper, "theory").Config
    return cfg_cls().with_overrides(list(assignments))


def _fail(err: Exception) -> None:
    msg = err.one_line() if isinstance(err, TdynError) else " ".join(str(err).split())
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def _check_out(out: str | None) -> Path | None:
    if out is None:
        return None
    p = Path(out)
    if p.suffix != ".nc":
        raise ConfigError("out", f"expected a .nc file name, got {out!r}")
    if not p.parent.exists() and str(p.parent) not in ("", "."):
        raise ConfigError("out", f"directory does not exist: {p.parent}")
    return p


def _partial_path(out: Path) -> Path:
    return out.with_name(out.stem + ".partial.nc")


class _Group(click.Group):
    """Map user errors raised anywhere below to one line and exit code 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (TdynError, ValueError, FloatingPointError) as err:
            _fail(err)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tdyn")
def main():
    """tdyn: derive, simulate and measure transformer training dynamics from theory papers."""


_set_option = click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE",
                           help="Override a config field (repeatable).")
_paper_arg = click.argument("paper")


@main.command()
@_paper_arg
@click.option("--format", "fmt", type=click.Choice(["latex", "python", "json"]), default="latex", show_default=True)
@_set_option
def derive(paper, fmt, assignments):
    """Print the derived reduced systems (LaTeX, Python source or JSON)."""
    from theory.core import systems_to_json

    cfg = _config(paper, assignments)
    systems = stage(paper, "theory").systems(cfg)
    if fmt == "json":
        click.echo(systems_to_json(paper, systems))
    elif fmt == "latex":
        for s in systems:
            click.echo(f"% {paper}/{s.name} — {s.spec}")
            click.echo(s.to_latex())
            click.echo()
    else:
        for i, s in enumerate(systems):
            if i == 0:
                click.echo(s.to_python())
            else:
                click.echo(f"\n# ---- {s.name} ----")
                click.echo(s.to_python(suffix=f"_{s.name}"))


@main.command()
@_paper_arg
@click.option("--backend", type=click.Choice(["diffrax", "scipy"]), default="diffrax", show_default=True)
@click.option("--sde", is_flag=True, help="Simulate minibatch SGD as an SDE ensemble.")
@click.option("--paths", type=int, default=64, show_default=True, help="SDE paths.")
@click.option("--seed", type=int, default=0, show_default=True)
@_set_option
@click.option("--out", type=str, default=None, help="Write the trajectory to FILE.nc (atomic).")
def simulate(paper, backend, sde, paths, seed, assignments, out):
    """Integrate the reduced ODE (or the SDE ensemble) for a config."""
    import simulate as sim

    out_path = _check_out(out)
    cfg = _config(paper, assignments)
    th = stage(paper, "theory")
    try:
        if sde:
            if not hasattr(th, "minibatch_sde"):
                raise ConfigError("sde", f"{paper} has no SDE model")
            model, t = th.minibatch_sde(cfg)
            traj = sim.solve_sde(model, t, paths=paths, seed=seed, parameters=cfg.to_dict())
        else:
            run = th.default_run(cfg)
            options = run.get("solve_options", {}).get(backend, {})  # optional per-backend method/tolerances
            traj = sim.solve(run["system"], run["params"], run["y0"], run["t"], backend=backend, **options)
    except SolverError as err:
        if out_path is not None and err.partial is not None:
            sim.save(err.partial, _partial_path(out_path))
            raise SolverError(err.paper, err.system, err.t_reached,
                              f"{err.message} (partial trajectory kept in {_partial_path(out_path)})") from None
        raise
    _report(traj, out_path)


def _report(traj, out_path):
    import simulate as sim

    last = {n: float(traj[n].values.reshape(-1, traj.sizes["time"])[:, -1].mean())
            for n in traj.data_vars if traj[n].dims[-1] == "time"}
    click.echo(f"{traj.attrs['paper']}/{traj.attrs['system']} ({traj.attrs['source']}): "
               f"{traj.sizes['time']} time points to t={float(traj.time[-1]):.6g}")
    for n, v in sorted(last.items()):
        click.echo(f"  {n:40s} {v: .6g}")
    if out_path is not None:
        sim.save(traj, out_path)
        click.echo(f"wrote {out_path}")


@main.command()
@_paper_arg
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--variant", default=None, help="Training variant (paper-specific).")
@_set_option
@click.option("--out", type=str, default=None, help="Write the trajectory to FILE.nc (atomic).")
@click.option("--progress/--no-progress", default=True, show_default=True)
def train(paper, device, variant, assignments, out, progress):
    """Train the real network and log the theory's observables."""
    import simulate as sim

    out_path = _check_out(out)
    cfg = _config(paper, assignments)
    emp = stage(paper, "empirical")
    try:
        traj = emp.run(cfg, device=device, variant=variant, progress=progress)
    except DivergenceError as err:
        if out_path is not None and err.partial is not None:
            sim.save(err.partial, _partial_path(out_path))
            raise DivergenceError(err.step, f"{err.message} (partial trajectory kept in {_partial_path(out_path)})") from None
        raise
    _report(traj, out_path)


@main.command()
@_paper_arg
@click.option("--quick/--full", default=True, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the agreement report as JSON.")
@click.option("--device", default="auto", show_default=True)
def compare(paper, quick, as_json, device):
    """Train inside the theory's regime and report theory-vs-practice agreement."""
    report = stage(paper, "figures").compare(quick=quick, device=device)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(f"{paper}: {report['regime']}")
        for n, v in report["observables"].items():
            click.echo(f"  {n:40s} rel_l2 = {v['rel_l2']:.4g}")
        click.echo(f"passed: {report['passed']}")
    if not report["passed"]:
        sys.exit(1)


@main.command()
@_paper_arg
@click.option("--quick/--full", default=True, show_default=True)
@click.option("--outdir", type=click.Path(file_okay=False), default=None)
def figures(paper, quick, outdir):
    """Regenerate a paper's figures into figures/out/<paper>/."""
    _figures(paper, quick, outdir)


def _figures(paper, quick, outdir):
    from figures.core import OUT_DIR

    out = Path(outdir) if outdir else OUT_DIR / module_name(paper)
    out.mkdir(parents=True, exist_ok=True)
    paths = stage(paper, "figures").make_figures(out, quick=quick)
    for p in paths:
        click.echo(f"wrote {p}")


@main.command()
@click.option("--quick/--full", default=True, show_default=True)
def reproduce(quick):
    """Regenerate the figures of every paper that exists."""
    for paper in available_papers():
        click.echo(f"== {paper}")
        _figures(paper, quick, None)


if __name__ == "__main__":  # pragma: no cover
    main()
