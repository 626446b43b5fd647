"""The ``tdyn`` command. Thin: parse, call one slot of the paper table (``figures/papers.py``),
print; user errors -> one line ``error: <field>: <message>`` on stderr and exit code 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from theory.errors import ConfigError, DivergenceError, SolverError, TdynError

from .papers import PAPERS, get


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
@click.option("--format", "fmt", type=click.Choice(["latex", "python", "jax", "json"]), default="latex",
              show_default=True)
@click.option("--expanded", is_flag=True, help="LaTeX: substitute the named quantities (per-component form).")
@click.option("--no-cache", is_flag=True, help="Derive afresh (ignore and do not use the on-disk cache).")
@_set_option
def derive(paper, fmt, expanded, no_cache, assignments):
    """Print the derived reduced systems (LaTeX, numpy or JAX source, or JSON).

    The output is cached on disk keyed by a hash of the theory source (theory/cache.py)."""
    from theory.cache import cached_json, function_digest

    row = get(paper)
    cfg = row.make_config(assignments)
    systems = row.slot("systems")
    key = (paper, fmt, bool(expanded), cfg.to_dict(), function_digest(systems))
    text = cached_json("derive", key, lambda: _derive_text(paper, systems(cfg), fmt, expanded),
                       use_cache=not no_cache)
    click.echo(text, nl=False)


def _derive_text(paper, systems, fmt, expanded) -> str:
    from theory.export import systems_to_json

    if fmt == "json":
        return systems_to_json(paper, systems) + "\n"
    if fmt == "latex":
        return "".join(f"% {paper}/{s.name} — {s.spec}\n{s.to_latex(expanded=expanded)}\n\n" for s in systems)
    export = (lambda s, suffix: s.to_python(suffix)) if fmt == "python" else (
        lambda s, suffix: s.to_jax_source(suffix))
    parts = [("" if i == 0 else f"\n# ---- {s.name} ----\n") + export(s, "" if i == 0 else f"_{s.name}") + "\n"
             for i, s in enumerate(systems)]
    return "".join(parts)


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

    row = get(paper)
    out_path = _check_out(out)
    cfg = row.make_config(assignments)
    try:
        if sde:
            model, t = row.slot("sde")(cfg)
            traj = sim.solve_sde(model, t, paths=paths, seed=seed, parameters=cfg.to_dict())
        else:
            traj = sim.solve(row.slot("problem")(cfg), backend=backend)
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

    row = get(paper)
    row.check_variant(variant)
    out_path = _check_out(out)
    cfg = row.make_config(assignments)
    try:
        traj = row.slot("train")(cfg, device=device, variant=variant, progress=progress)
    except DivergenceError as err:
        if out_path is not None and err.partial is not None:
            sim.save(err.partial, _partial_path(out_path))
            raise DivergenceError(err.step, f"{err.message} (partial trajectory kept in {_partial_path(out_path)})") from None
        raise
    _report(traj, out_path)


@main.command()
@_paper_arg
@click.option("--quick/--full", default=True, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the report (agreement and claims) as JSON.")
@click.option("--device", default="auto", show_default=True)
def compare(paper, quick, as_json, device):
    """Train inside the theory's regime; report agreement per observable and the paper's claims."""
    report = get(paper).slot("compare")(quick=quick, device=device)
    if isinstance(report, dict):  # TEMPORARY: papers not yet ported to Report
        from .report import Observable, Report
        report = Report(report["paper"], report["regime"],
                        [Observable(n, v["rel_l2"], 0.05) for n, v in report["observables"].items()],
                        details={k: v for k, v in report.items() if k not in ("paper", "regime", "observables")})
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else report.table())
    if not report.passed:
        sys.exit(1)


@main.command()
@_paper_arg
@click.option("--quick/--full", default=True, show_default=True)
@click.option("--outdir", type=click.Path(file_okay=False), default=None)
@click.option("--device", default="auto", show_default=True)
def figures(paper, quick, outdir, device):
    """Regenerate a paper's figures into figures/out/<paper>/."""
    _figures(get(paper), quick, outdir, device)


def _figures(row, quick, outdir, device):
    from .core import OUT_DIR

    out = Path(outdir) if outdir else OUT_DIR / row.module
    out.mkdir(parents=True, exist_ok=True)
    for p in row.slot("figures")(out, quick=quick, device=device):
        click.echo(f"wrote {p}")


@main.command()
@click.option("--quick/--full", default=True, show_default=True)
@click.option("--device", default="auto", show_default=True)
def reproduce(quick, device):
    """Regenerate the figures of every paper in the table."""
    for row in PAPERS.values():
        click.echo(f"== {row.name}")
        _figures(row, quick, None, device)


if __name__ == "__main__":  # pragma: no cover
    main()
