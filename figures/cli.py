"""The ``tdyn`` command. Thin: parse, validate, call one slot of the paper table
(``figures/papers.py``), print.

Every command first runs **one validation pass** (:func:`_validate`) before any computation or file
creation: paper and variant names, config fields, resource estimates against documented limits
(``theory/limits.py``; ``--allow-large`` overrides), output paths (directory exists and is
writable, target is not a directory), checkpoint directory and fingerprint. Every user error —
click's usage errors included — is one line ``error: <field>: <message>`` on stderr and exit code 2
(usage text only on ``-h``); an interrupt (Ctrl-C, SIGTERM) is one line and exit 130/143.
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from theory.errors import ConfigError, DivergenceError, SolverError, TdynError

from .papers import PAPERS, get
from .validation import check_out, check_outdir, read_from

__all__ = ["main"]


def _fail(err: Exception) -> None:
    msg = err.one_line() if isinstance(err, TdynError) else " ".join(str(err).split())
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def _usage_field(err: click.UsageError) -> str:
    """The option/argument a click usage error is about (``--format`` -> ``format``)."""
    param = getattr(err, "param", None)
    if param is not None:
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        return (opts[0][2:] if opts else param.name or "argument").replace("-", "_")
    name = getattr(err, "option_name", None)
    if name:
        return name.lstrip("-").replace("-", "_")
    return "command" if "command" in err.format_message().lower() else "usage"


class _Group(click.Group):
    """Map user errors raised anywhere below to one line and exit code 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from simulate.trajectory import Terminated, terminate_as_exception

        try:
            with terminate_as_exception():
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as err:
            if err.ctx is not None and type(err).__name__ == "NoArgsIsHelpError":
                click.echo(err.ctx.get_help())
                sys.exit(0)
            click.echo(f"error: {_usage_field(err)}: {' '.join(err.format_message().split())}", err=True)
            sys.exit(2)
        except click.ClickException as err:
            click.echo(f"error: {' '.join(err.format_message().split())}", err=True)
            sys.exit(err.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo("error: interrupted: stopped by Ctrl-C (files written so far are complete)", err=True)
            sys.exit(130)
        except Terminated:
            click.echo("error: interrupted: stopped by SIGTERM (files written so far are complete)", err=True)
            sys.exit(143)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

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
_large_option = click.option("--allow-large", is_flag=True,
                             help="Run even where the resource estimate exceeds its limit (theory/limits.py).")
_from_option = click.option("--from", "from_file", type=str, default=None, metavar="FILE.nc",
                            help="Re-run from a trajectory's recorded config and options (--set still applies).")


# ------------------------------------------------------------------------------------------------
# The validation pass (no computation, no file created)
# ------------------------------------------------------------------------------------------------
@dataclass
class _Run:
    """What the validation pass hands to a command."""

    row: Any
    cfg: Any
    out: Path | None = None
    invocation: dict | None = None


def _validate(command: str, paper: str | None, assignments=(), *, variant=None, out=None, paths=0,
              allow_large=False, from_file=None, options=None) -> _Run:
    """The one validation pass of ``command``; raises ``ConfigError`` before anything is computed.
    ``options`` (a dict of this command's options, updated in place) take the values recorded in
    ``--from FILE`` unless given on the command line."""
    from theory.limits import check

    recorded, invocation = None, {}
    if from_file is not None:
        paper_f, recorded, invocation = read_from(from_file)
        if paper is not None and paper != paper_f:
            raise ConfigError("paper", f"{from_file} is a {paper_f} trajectory, not {paper}")
        paper = paper_f
        ctx = click.get_current_context()
        for k, v in invocation.items():
            if options is not None and k in options and ctx.get_parameter_source(k) != ParameterSource.COMMANDLINE:
                options[k] = v
        variant = options.get("variant", variant) if options else variant
        paths = options.get("paths", paths) if options else paths
    if paper is None:
        raise ConfigError("paper", "give a paper name (or --from FILE.nc)")
    row = get(paper)
    row.check_variant(variant)
    out_path = check_out(out)
    cfg = row.Config.from_dict(recorded, field="from") if recorded is not None else row.Config()
    cfg = cfg.with_overrides(list(assignments))
    kind = "sde" if command == "simulate" and options and options.get("sde") else command
    check(row.name, cfg, kind, paths=paths, allow_large=allow_large,
          estimator=row.slot("estimate") if row.estimate is not None else None)
    return _Run(row, cfg, out_path, {"command": command, **(options or {})})


def _stamp(traj, run: _Run):
    """Record the full config and the command's options (provenance; ``--from`` reads them)."""
    from simulate.trajectory import config_attrs

    traj.attrs.update(config_attrs(run.cfg))
    traj.attrs["invocation"] = json.dumps(run.invocation, sort_keys=True)
    return traj


def _partial_path(out: Path) -> Path:
    return out.with_name(out.stem + ".partial.nc")


def _keep_partial(err, run: _Run):
    """Save a failure's partial trajectory beside ``--out`` when it holds a time point; re-raise
    the error with a note saying where it went (or why nothing was written)."""
    import simulate as sim

    if run.out is None:
        raise err
    if err.partial is None or err.partial.sizes.get("time", 0) < 1:
        raise err.with_note("no finite time point, nothing written") from None
    sim.save(_stamp(err.partial, run), _partial_path(run.out))
    raise err.with_note(f"partial trajectory kept in {_partial_path(run.out)}") from None


# ------------------------------------------------------------------------------------------------
# Commands
# ------------------------------------------------------------------------------------------------
@main.command()
@_paper_arg
@click.option("--format", "fmt", type=click.Choice(["latex", "python", "jax", "json"]), default="latex",
              show_default=True)
@click.option("--expanded", is_flag=True, help="LaTeX: substitute the named quantities (per-component form).")
@click.option("--no-cache", is_flag=True, help="Derive afresh (ignore and do not use the on-disk cache).")
@_set_option
@_large_option
def derive(paper, fmt, expanded, no_cache, assignments, allow_large):
    """Print the derived reduced systems (LaTeX, numpy or JAX source, or JSON).

    The output is cached on disk keyed by a hash of the theory source (theory/cache.py)."""
    from theory.cache import cached_json, function_digest

    run = _validate("derive", paper, assignments, allow_large=allow_large)
    systems = run.row.slot("systems")
    key = (paper, fmt, bool(expanded), run.cfg.to_dict(), function_digest(systems))
    text = cached_json("derive", key, lambda: _derive_text(paper, systems(run.cfg), fmt, expanded),
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
@click.argument("paper", required=False)
@click.option("--backend", type=click.Choice(["diffrax", "scipy"]), default="diffrax", show_default=True)
@click.option("--sde", is_flag=True, help="Simulate minibatch SGD as an SDE ensemble.")
@click.option("--paths", type=click.IntRange(min=1), default=64, show_default=True, help="SDE paths.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True, help="SDE noise seed.")
@_set_option
@click.option("--out", type=str, default=None, help="Write the trajectory to FILE.nc (atomic).")
@_large_option
@_from_option
def simulate(paper, backend, sde, paths, seed, assignments, out, allow_large, from_file):
    """Integrate the reduced ODE (or the SDE ensemble) for a config."""
    import simulate as sim

    opts = {"backend": backend, "sde": sde, "paths": paths, "seed": seed}
    run = _validate("simulate", paper, assignments, out=out, paths=paths if sde else 0,
                    allow_large=allow_large, from_file=from_file, options=opts)
    try:
        if opts["sde"]:
            model, t = run.row.slot("sde")(run.cfg)
            traj = sim.solve_sde(model, t, paths=opts["paths"], seed=opts["seed"], parameters=run.cfg.to_dict())
        else:
            traj = sim.solve(run.row.slot("problem")(run.cfg), backend=opts["backend"])
    except SolverError as err:
        _keep_partial(err, run)
    _report(_stamp(traj, run), run.out)


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


def _check_checkpoint(run: _Run, checkpoint, resume) -> dict:
    """``--checkpoint DIR [--resume]``: a usable directory, a train slot that takes it, and on resume
    a checkpoint written for this very config and code version. Returns the slot's keywords."""
    if checkpoint is None:
        if resume:
            raise ConfigError("resume", "needs --checkpoint DIR")
        return {}
    from empirical.trainer import checkpoint_paths, fingerprint_mismatch, read_fingerprint
    from simulate.trajectory import jsonable, code_version

    fn = run.row.slot("train")
    if "checkpoint" not in inspect.signature(fn).parameters:
        raise ConfigError("checkpoint", f"{run.row.name}'s train slot does not take checkpoints yet")
    d = Path(checkpoint)
    if d.exists() and not d.is_dir():
        raise ConfigError("checkpoint", f"not a directory: {checkpoint}")
    check_outdir(checkpoint, "checkpoint")
    saved = read_fingerprint(d) if resume and d.is_dir() else None
    if saved is not None:
        why = fingerprint_mismatch({k: saved.get(k) for k in ("paper", "config", "code_version")},
                                   {"paper": run.row.name, "config": jsonable(run.cfg.to_dict()),
                                    "code_version": code_version()})
        if why:
            raise ConfigError("resume", why)
    return {"checkpoint": str(checkpoint_paths(d)[0].parent)}


@main.command()
@click.argument("paper", required=False)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--variant", default=None, help="Training variant (paper-specific).")
@_set_option
@click.option("--out", type=str, default=None, help="Write the trajectory to FILE.nc (atomic).")
@click.option("--progress/--no-progress", default=True, show_default=True)
@click.option("--checkpoint", type=str, default=None, metavar="DIR", help="Save checkpoints in DIR.")
@click.option("--checkpoint-every", type=click.IntRange(min=0), default=0, show_default=True,
              help="Steps between checkpoints (0: at every logging step).")
@click.option("--resume", is_flag=True, help="Continue from the checkpoint in DIR (same config and code only).")
@_large_option
@_from_option
def train(paper, device, variant, assignments, out, progress, checkpoint, checkpoint_every, resume,
          allow_large, from_file):
    """Train the real network and log the theory's observables."""
    from empirical.trainer import resolve_device

    opts = {"device": device, "variant": variant}
    run = _validate("train", paper, assignments, variant=variant, out=out, allow_large=allow_large,
                    from_file=from_file, options=opts)
    resolve_device(opts["device"])
    kw = _check_checkpoint(run, checkpoint, resume)
    if kw:
        kw.update(checkpoint_every=checkpoint_every, resume=resume)
    try:
        traj = run.row.slot("train")(run.cfg, device=opts["device"], variant=opts["variant"], progress=progress, **kw)
    except DivergenceError as err:
        _keep_partial(err, run)
    _report(_stamp(traj, run), run.out)


@main.command()
@_paper_arg
@click.option("--quick/--full", default=True, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the report (agreement and claims) as JSON.")
@click.option("--device", default="auto", show_default=True)
def compare(paper, quick, as_json, device):
    """Train inside the theory's regime; report agreement per observable and the paper's claims."""
    report = get(paper).slot("compare")(quick=quick, device=device)
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else report.table())
    if not report.agreement_passed:
        sys.exit(1)


@main.command()
@_paper_arg
@click.option("--quick/--full", default=True, show_default=True,
              help="Quick: >= 5 seeds and the quick map; full: >= 12 seeds and the full map.")
@click.option("--json", "as_json", is_flag=True, help="Print every claim with its evidence (map points) as JSON.")
@click.option("--device", default="auto", show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Local processes for the map cells.")
@click.option("--store", default=None, metavar="DIR",
              help="Keep the map cells in DIR/claims/<paper>/<claim> (default: under figures/out/<paper>/claims/store); "
                   "finished cells are not recomputed.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS", help="Run the map cells on a Ray cluster (or 'auto').")
@click.option("--progress/--no-progress", default=True, show_default=True)
def claims(paper, quick, as_json, device, workers, store, ray_address, progress):
    """Decide the paper's claims over seeds inside its regime, with their validity maps."""
    from .claims import NoClaims, run_claims
    from .claims_report import claims_table

    row = get(paper)
    with _checked_sweep(store, workers, ray_address):
        try:
            results = run_claims(row.name, quick=quick, device=device, progress=progress)
        except NoClaims as err:
            click.echo(f"note: {err.message}", err=True)
            results = []
    click.echo(json.dumps([r.to_json() for r in results], indent=2) if as_json else claims_table(results, row.name))
    failed = sum(r.failed_cells for r in results)
    if failed:
        click.echo(f"error: claims: {failed} map cell(s) failed (see the stores' index.csv); rerun to retry them",
                   err=True)
        sys.exit(1)


_corpus_option = click.option("--corpus", default=None, metavar="DIR",
                              help="WikiText directory for the real-text figures (default ../shared/data/wikitext-2 "
                                   "beside the repository; 'wikitext-103' with the datasets package).")


def _checked_corpus(corpus):
    """Validate ``--corpus`` up front (one-line error, exit 2) and make it the default."""
    from empirical import text

    if corpus is not None:
        text.check_corpus(corpus)
    return text.using_corpus(corpus)


def _text_sweep_options(f):
    """``--workers`` / ``--store`` / ``--ray`` of the protocols that are grids of runs (the real-text
    runs, Scan & Snap Fig. 6, the SCB l1 study): sweep cells."""
    f = click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
                     help="Run the grids of runs (real text, Scan & Snap Fig. 6, the SCB l1 study) on a Ray cluster "
                          "(an address or 'auto').")(f)
    f = click.option("--store", default=None, metavar="DIR",
                     help="Keep the grids' runs in DIR/<paper>, DIR/scan-snap-fig6 and DIR/scb-l1 (default: under "
                          "<outdir>); finished runs are not recomputed.")(f)
    return click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
                        help="Local processes for the grids of runs.")(f)


def _checked_sweep(store, workers, ray_address):
    """Validate ``--store``/``--ray`` up front and make them (and ``--workers``) the default."""
    import importlib.util

    from empirical.sweeps import check_ray_address

    from .sweep import using_sweep

    if store is not None:
        check_outdir(store, "store")
    if ray_address is not None:
        check_ray_address(ray_address)  # an address nobody answers: seconds, not ray.init's minutes
    if ray_address is not None and importlib.util.find_spec("ray") is None:
        raise ConfigError("ray", "ray is not installed (pip install tdyn[cluster])")
    return using_sweep(store, workers, ray_address)


@main.command()
@_paper_arg
@click.option("--quick/--full", default=True, show_default=True)
@click.option("--outdir", type=click.Path(file_okay=False), default=None)
@click.option("--device", default="auto", show_default=True)
@_corpus_option
@_text_sweep_options
def figures(paper, quick, outdir, device, corpus, workers, store, ray_address):
    """Regenerate a paper's figures into figures/out/<paper>/."""
    row = get(paper)
    outdir = check_outdir(outdir)
    with _checked_corpus(corpus), _checked_sweep(store, workers, ray_address):
        _figures(row, quick, outdir, device)


def _figures(row, quick, outdir, device):
    from .core import OUT_DIR, make_figures

    out = Path(outdir) if outdir else OUT_DIR / row.module
    for p in make_figures(row.name, out, quick=quick, device=device):
        click.echo(f"wrote {p}")


@main.command()
@_paper_arg
@click.option("--grid", "grid", multiple=True, required=True, metavar="KEY=V1,V2,...",
              help="A swept config field (repeatable; the sweep is their product).")
@click.option("--seeds", type=click.IntRange(min=0), default=0, show_default=True,
              help="Repeat each point for seed = 0 .. N-1.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Local processes.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS", help="Run on a Ray cluster (or 'auto').")
@click.option("--store", default="sweeps", show_default=True, metavar="DIR",
              help="Result store (NetCDF per cell + index.csv); finished cells are skipped.")
@click.option("--kind", type=click.Choice(["train", "ode", "text"]), default="train", show_default=True,
              help="train: the paper's training runs; ode: its ODE solves; text: its real-text run "
                   "(JoMA Fig. 8, Scan & Snap Fig. 10, topic).")
@click.option("--variant", default=None)
@click.option("--device", default="cpu", show_default=True)
@click.option("--backend", type=click.Choice(["diffrax", "scipy"]), default="diffrax", show_default=True,
              help="ODE cells: the solver backend.")
@_set_option
@_large_option
@_corpus_option
def sweep(paper, grid, seeds, workers, ray_address, store, kind, variant, device, backend, assignments, allow_large,
          corpus):
    """Run a grid of training runs (or ODE solves) into a resumable result store."""
    from .sweep import KINDS, plan
    from empirical.sweeps import run_cells

    with _checked_corpus(corpus):  # kind=text: the corpus of the real-text runs
        cells = plan(paper, grid, seeds=seeds, overrides=assignments, kind=kind, variant=variant, device=device,
                     backend=backend, allow_large=allow_large)
    check_outdir(store, "store")

    def progress(key, status, err):
        click.echo(f"{key} {status}{': ' + err if err else ''}")

    idx = run_cells(KINDS[kind], cells, store, workers=workers, ray=ray_address, progress=progress)
    n_ok, n = int((idx["status"] == "ok").sum()), len(idx)
    click.echo(f"{n_ok}/{n} cells done in {Path(store) / 'index.csv'}")
    if n_ok < n:
        click.echo(f"error: sweep: {n - n_ok} cell(s) failed (see index.csv); rerun to retry them", err=True)
        sys.exit(1)


@main.command()
@click.option("--quick/--full", default=True, show_default=True)
@click.option("--device", default="auto", show_default=True)
@_corpus_option
@_text_sweep_options
def reproduce(quick, device, corpus, workers, store, ray_address):
    """Regenerate the figures of every paper in the table."""
    from .core import OUT_DIR

    check_outdir(str(OUT_DIR))
    with _checked_corpus(corpus), _checked_sweep(store, workers, ray_address):
        for row in PAPERS.values():
            click.echo(f"== {row.name}")
            _figures(row, quick, None, device)
    from .claims_report import claims_summary, read_claims, write_claims_md

    decided = read_claims(OUT_DIR, list(PAPERS.values()))
    click.echo(claims_summary(decided))
    click.echo(f"wrote {write_claims_md(decided, OUT_DIR / 'claims.md')}")


if __name__ == "__main__":  # pragma: no cover
    main()
