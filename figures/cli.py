"""The ``tdyn`` command. Thin: parse, validate, call one slot of the paper table
(:mod:`figures.papers`, built from the ``tdyn.papers`` entry points), print.

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
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from theory.errors import ConfigError, DivergenceError, SolverError, TdynError

from .context import CPU_CORE_HOURS, RunContext
from .papers import PAPERS, get
from .validation import check_out, check_outdir, check_path, check_writable_dir, read_from

__all__ = ["main"]


def _fail(err: Exception) -> None:
    msg = err.one_line() if isinstance(err, TdynError) else " ".join(str(err).split())
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """``warnings.showwarning`` of the CLI: a :class:`~theory.errors.TdynWarning` is one line
    ``warning: <field>: <message>`` on stderr; any other warning as Python prints it."""
    import warnings

    from theory.errors import TdynWarning

    if isinstance(message, TdynWarning):
        click.echo(f"warning: {' '.join(str(message).split())}", err=True)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


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
    """Map user errors raised anywhere below to one line and exit code 2; the help lists the papers."""

    def format_epilog(self, ctx, formatter):
        with formatter.section("Papers (PAPER)"):
            formatter.write_dl([(row.name, row.title) for row in PAPERS.values()])
        super().format_epilog(ctx, formatter)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        import warnings

        from simulate.trajectory import Terminated, terminate_as_exception

        try:
            with terminate_as_exception(), warnings.catch_warnings():
                warnings.showwarning = _show_warning
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
        except (click.Abort, KeyboardInterrupt, _Interrupted) as err:
            if getattr(err, "signum", None) == signal.SIGTERM:  # deferred by the Trainer to a step's end
                click.echo("error: interrupted: stopped by SIGTERM (files written so far are complete)", err=True)
                _exit_interrupted(143)
            if sys.stderr.isatty():  # end the terminal's "^C" echo; a pipe gets exactly one line
                click.echo("", err=True)
            click.echo("interrupted: stopped by Ctrl-C (files written so far are complete)", err=True)
            _exit_interrupted(130)
        except Terminated:
            click.echo("error: interrupted: stopped by SIGTERM (files written so far are complete)", err=True)
            _exit_interrupted(143)
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (TdynError, ValueError, FloatingPointError) as err:
            _fail(err)
        except KeyboardInterrupt as err:  # past click's handler, which prints a blank line first
            raise _Interrupted(getattr(err, "signum", signal.SIGINT)) from err


def _exit_interrupted(code: int):
    """Exit ``code`` after an interrupt's one line: a further Ctrl-C/SIGTERM while the interpreter
    shuts down is ignored (it would otherwise kill the process with the signal's default action).
    A ``SystemExit``, so that a caller of the group (a test's ``CliRunner``) sees the code; the
    console script then ends the process with exactly it (:func:`figures._console.main`)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)


class _Interrupted(BaseException):
    """Ctrl-C (or a SIGTERM the Trainer deferred: ``TrainingInterrupted.signum``) below the group:
    reported by :meth:`_Group.main` in one line, exit 130 (SIGINT) or 143 (SIGTERM)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.signum = int(signum)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tdyn")
def main():
    """tdyn: derive, simulate and measure transformer training dynamics from theory papers."""


def _papers_epilog() -> str:
    """The help's list of papers and their training variants (from the paper table)."""
    lines = [f"  {row.name:10s}" + (f" variants: {', '.join(row.variants)}" if row.variants else "")
             for row in PAPERS.values()]
    return "\b\nPAPER is one of:\n" + "\n".join(lines)


def _variant_help() -> str:
    variants = "; ".join(f"{r.name}: {', '.join(r.variants)}" for r in PAPERS.values() if r.variants)
    return f"Training variant: {variants}."


def _command(**kw):
    """``@main.command`` for a command that takes PAPER: its help lists the papers and variants."""
    return main.command(epilog=_papers_epilog(), **kw)


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


def _validate(cli_command: str, paper: str | None, assignments=(), *, variant=None, out=None, paths=0,
              allow_large=False, from_file=None, options=None) -> _Run:
    """The one validation pass of ``tdyn <cli_command>``; raises ``ConfigError`` before anything is computed.
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
    base = row.Config.from_dict(recorded, field="from") if recorded is not None else None
    cfg = row.make_config(assignments, variant=variant, base=base)  # the variant first, then --set
    # the command whose resources are estimated (theory.limits.COMMANDS): `simulate --sde` is "sde"
    command = "sde" if cli_command == "simulate" and options and options.get("sde") else cli_command
    check(row.name, cfg, command, paths=paths, allow_large=allow_large,
          estimator=row.slot("estimate") if row.estimate is not None else None)
    return _Run(row, cfg, out_path, {"command": cli_command, **(options or {})})


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
    try:
        sim.save_or_rescue(_stamp(err.partial, run), _partial_path(run.out))
    except sim.WriteFailed as failed:  # a full disk: say where the partial went (or that it is lost)
        raise err.with_note(f"partial trajectory not kept: {failed.message}") from None
    raise err.with_note(f"partial trajectory kept in {_partial_path(run.out)}") from None


# ------------------------------------------------------------------------------------------------
# Commands
# ------------------------------------------------------------------------------------------------
@_command()
@_paper_arg
@click.option("--format", "fmt", type=click.Choice(["latex", "python", "jax", "json"]), default="latex",
              show_default=True, help="latex: align environments; python/jax: source of rhs(t, y, p); "
                                      "json: what theory.load_system reads back.")
@click.option("--system", "system_name", default=None, metavar="NAME",
              help="Only the system NAME (json: a one-system document); default: every system of the paper.")
@click.option("--standalone", is_flag=True, help="LaTeX: a complete document that compiles with pdflatex.")
@click.option("--expanded", is_flag=True, help="LaTeX: substitute the named quantities (per-component form).")
@click.option("--no-cache", is_flag=True, help="Derive afresh (ignore and do not use the on-disk cache).")
@_set_option
@_large_option
def derive(paper, fmt, system_name, standalone, expanded, no_cache, assignments, allow_large):
    """Print the derived reduced systems (LaTeX, numpy or JAX source, or JSON).

    The output is cached on disk keyed by a hash of the theory source (theory/cache.py)."""
    from theory.cache import cached_json, function_digest

    run = _validate("derive", paper, assignments, allow_large=allow_large)
    if standalone and fmt != "latex":
        raise ConfigError("standalone", f"only for --format latex, not {fmt}")
    systems = run.row.slot("systems")
    key = (paper, fmt, bool(expanded), run.cfg.to_dict(), function_digest(systems), system_name, bool(standalone))
    text = cached_json("derive", key, lambda: _derive_text(
        paper, _pick_systems(paper, systems(run.cfg), system_name), fmt, expanded, standalone, system_name),
        use_cache=not no_cache)
    click.echo(text, nl=False)


def _pick_systems(paper, systems, name):
    """``systems``, or only the one called ``name`` (``ConfigError("system", ...)`` naming the others)."""
    from theory.errors import did_you_mean

    if name is None:
        return systems
    names = [s.name for s in systems]
    if name not in names:
        raise ConfigError("system", f"{paper} has no system {name!r}{did_you_mean(name, names)}; "
                                    f"its systems: {', '.join(names)}")
    return [systems[names.index(name)]]


def _derive_text(paper, systems, fmt, expanded, standalone=False, one=None) -> str:
    from theory.export import latex_document, latex_listing, systems_to_json

    if fmt == "json":
        return (json.dumps(systems[0].to_json(), indent=2) if one else systems_to_json(paper, systems)) + "\n"
    if fmt == "latex":
        if standalone:
            return latex_document(paper, [(s, s.to_latex(expanded=expanded)) for s in systems])
        return latex_listing(paper, systems, expanded)
    export = (lambda s, suffix: s.to_python(suffix)) if fmt == "python" else (
        lambda s, suffix: s.to_jax_source(suffix))
    parts = [("" if i == 0 else f"\n# ---- {s.name} ----\n") + export(s, "" if i == 0 else f"_{s.name}") + "\n"
             for i, s in enumerate(systems)]
    return "".join(parts)


@_command()
@click.argument("paper", required=False)
@click.option("--backend", type=click.Choice(["numba", "diffrax", "scipy"]), default="numba", show_default=True,
              help="ODE solver: numba (stiffness-aware: compiled DOP853, LSODA once stiff), diffrax (jax, "
                   "Kvaerno5) or scipy (solve_ivp, Radau); they agree.")
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
            traj = sim.solve_sde(model, t, paths=opts["paths"], seed=opts["seed"],
                                  parameter_values=run.cfg.to_dict())
        else:
            traj = sim.solve(run.row.slot("problem")(run.cfg), backend=opts["backend"])
    except SolverError as err:
        _keep_partial(err, run)
    _report(_stamp(traj, run), run.out)


def _report(traj, out_path):
    """The run in a few lines: what it is, and its headline observables at the end (final value;
    mean and 10-90 % band for an SDE ensemble), :func:`figures.plot.summary`."""
    import simulate as sim

    from .plot import summary

    click.echo(f"{traj.attrs['paper']}/{traj.attrs['system']} ({traj.attrs['source']}): "
               f"{traj.sizes['time']} time points to t={float(traj.time[-1]):.6g}")
    for line in summary(traj):
        click.echo(line)
    if out_path is not None:
        sim.save_or_rescue(traj, out_path)  # a full disk: WriteFailed says where the result went
        click.echo(f"wrote {out_path}")


def _check_checkpoint(run: _Run, checkpoint, resume, *, folder: bool = False) -> dict:
    """``--checkpoint DIR [--resume]``: a usable directory, a train slot that takes it, and on resume
    a checkpoint written for this very config and code version. Returns the slot's keywords."""
    if checkpoint is None:
        if resume:
            raise ConfigError("resume", "needs --checkpoint DIR (or the --out FILE.nc of the interrupted run)")
        return {}
    from empirical.trainer import checkpoint_paths, checkpoint_problem, fingerprint_mismatch, read_fingerprint
    from simulate.trajectory import jsonable, code_version

    if not _takes_checkpoint(run.row):
        raise ConfigError("checkpoint", f"{run.row.name}'s train slot does not take checkpoints yet")
    d = check_path("checkpoint", checkpoint)
    if d.exists() and not d.is_dir():
        raise ConfigError("checkpoint", f"not a directory: {checkpoint}")
    check_outdir(checkpoint, "checkpoint")
    where = d if folder else checkpoint_paths(d)[0].parent  # the folder the train slot is given
    state, meta = checkpoint_paths(where)
    if not resume:  # a new run never replaces another run's checkpoint without a word
        if state.exists() or meta.exists():
            raise ConfigError("checkpoint", f"{checkpoint} already holds the checkpoint of a run{_checkpoint_step(meta)}; "
                                            "continue it with --resume, or remove it (or choose another DIR) to "
                                            "start a new run")
        return {"checkpoint": str(where)}
    if not state.exists():
        raise ConfigError("resume", f"no checkpoint to resume in {checkpoint} (it holds no {state.name}); "
                                    "drop --resume to start a new run there")
    why = checkpoint_problem(state)
    if why is not None:
        raise ConfigError("resume", f"checkpoint {state} is damaged ({why}); remove it to start the run again")
    saved = read_fingerprint(where)
    if saved is not None:
        why = fingerprint_mismatch({k: saved.get(k) for k in ("paper", "config", "code_version")},
                                   {"paper": run.row.name, "config": jsonable(run.cfg.to_dict()),
                                    "code_version": code_version()})
        if why:
            raise ConfigError("resume", why)
    return {"checkpoint": str(where)}


def _takes_checkpoint(row) -> bool:
    return "checkpoint" in inspect.signature(row.slot("train")).parameters


def _default_checkpoint(run: _Run) -> str | None:
    """The checkpoint folder of a ``tdyn train --out FILE.nc`` given no ``--checkpoint``:
    ``FILE.ckpt/`` beside the output (``None`` without ``--out`` or where the train slot takes no
    checkpoints). It is removed once ``FILE.nc`` is written."""
    if run.out is None or not _takes_checkpoint(run.row):
        return None
    return str(run.out.with_name(run.out.stem + ".ckpt"))


def _checkpoint_step(meta: Path) -> str:
    """`` (step 16989 of 30000)`` from a checkpoint's JSON, or ``""`` when unreadable."""
    try:
        info = json.loads(meta.read_text())
        return f" (step {int(info['step'])} of {int(info['steps'])})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


@_command()
@click.argument("paper", required=False)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--variant", default=None, metavar="V", help=_variant_help() + " Applied before --set.")
@_set_option
@click.option("--out", type=str, default=None, metavar="FILE.nc",
              help="Write the trajectory to FILE.nc (atomic); on Ctrl-C/SIGTERM or divergence the part logged so "
                   "far goes to FILE.partial.nc.")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Show the training bar (steps/s, ETA) on stderr when it is a terminal.")
@click.option("--checkpoint", type=str, default=None, metavar="DIR",
              help="Save checkpoints in DIR (also when interrupted) so that --resume continues the run; "
                   "default with --out FILE.nc: FILE.ckpt/ beside it, removed once FILE.nc is written.")
@click.option("--checkpoint-every", default=None, metavar="N|Ts",
              help="Checkpoint interval: N steps (e.g. 500), a time (e.g. 60s, 5m), or 0 for every logging "
                   "step.  [default: 60s]")
@click.option("--resume", is_flag=True,
              help="Continue from the checkpoint in DIR, or beside --out (same config and code only).")
@_large_option
@_from_option
def train(paper, device, variant, assignments, out, progress, checkpoint, checkpoint_every, resume,
          allow_large, from_file):
    """Train the real network and log the theory's observables.

    Ctrl-C or SIGTERM stops at the end of the current step: the trajectory logged so far is kept
    as FILE.partial.nc (with --out) and the last line says how to resume. With --out and no
    --checkpoint, checkpoints go to FILE.ckpt/ beside it (removed once FILE.nc is written)."""
    from empirical.trainer import TrainingInterrupted, parse_every, resolve_device

    from .progress import active

    opts = {"device": device, "variant": variant}
    run = _validate("train", paper, assignments, variant=variant, out=out, allow_large=allow_large,
                    from_file=from_file, options=opts)
    resolve_device(opts["device"])
    parse_every(checkpoint_every)
    given = checkpoint  # the user's --checkpoint (None: the default one beside --out, if any)
    checkpoint = checkpoint if checkpoint is not None else _default_checkpoint(run)
    kw = _check_checkpoint(run, checkpoint, resume, folder=given is None)
    if kw:
        kw.update(checkpoint_every=checkpoint_every, resume=resume)
        if given is None:  # FILE.ckpt/ exists, so that it is read as a folder (not FILE.ckpt + .json)
            Path(checkpoint).mkdir(exist_ok=True)
    try:
        variant = run.row.train_variant(run.cfg, opts["variant"])  # the config's own, where it has one
        traj = run.row.slot("train")(run.cfg, device=opts["device"], variant=variant,
                                     progress=progress and active(), **kw)
    except DivergenceError as err:  # a resume would diverge again: the default checkpoint goes
        if given is None and checkpoint is not None:
            _drop_checkpoint(checkpoint)
        _keep_partial(err, run)
    except TrainingInterrupted as err:
        _train_interrupted(err, run, paper=paper, checkpoint=checkpoint, argv=_resume_argv(
            paper, from_file, opts, assignments, out, given, checkpoint_every))
    _report(_stamp(traj, run), run.out)
    if run.out is not None:
        _tidy_after_success(run.out, checkpoint if given is None else None, resume)


def _tidy_after_success(out: Path, default_checkpoint: str | None, resumed: bool) -> None:
    """Once ``out`` is written: the default checkpoint beside it has done its work (removed), and
    after a resume the ``FILE.partial.nc`` of the interrupted run is stale (removed)."""
    if default_checkpoint is not None:
        _drop_checkpoint(default_checkpoint)
    if resumed:
        _partial_path(out).unlink(missing_ok=True)


def _drop_checkpoint(folder: str) -> None:
    """Remove the default checkpoint folder ``FILE.ckpt/`` (only the checkpoint's own files)."""
    from empirical.trainer import checkpoint_paths

    for f in checkpoint_paths(folder):
        f.unlink(missing_ok=True)
    try:
        Path(folder).rmdir()
    except OSError:  # not empty (files of the user's own) or already gone: left as it is
        pass


def _resume_argv(paper, from_file, opts, assignments, out, checkpoint, checkpoint_every) -> list[str]:
    """The ``tdyn train`` arguments that continue this run from its checkpoint."""
    argv = ["tdyn", "train"] + ([paper] if paper else []) + (["--from", from_file] if from_file else [])
    argv += ["--device", opts["device"]] + (["--variant", opts["variant"]] if opts["variant"] else [])
    for a in assignments:
        argv += ["--set", a]
    argv += (["--out", out] if out else []) + (["--checkpoint", str(checkpoint)] if checkpoint is not None else [])
    argv += (["--checkpoint-every", str(checkpoint_every)] if checkpoint_every is not None else []) + ["--resume"]
    return argv


def _train_interrupted(err, run: _Run, *, paper, checkpoint, argv):
    """Ctrl-C/SIGTERM during ``tdyn train``: keep the trajectory logged so far as FILE.partial.nc,
    print one line (what was kept, how to resume) and exit 130 (SIGINT) or 143 (SIGTERM)."""
    import shlex
    import signal

    import simulate as sim

    name = "Ctrl-C" if err.signum == signal.SIGINT else signal.Signals(err.signum).name
    # the user's own Ctrl-C is no error; a SIGTERM (a scheduler, a shutdown) is reported as one
    parts = [("" if err.signum == signal.SIGINT else "error: ") + f"interrupted: stopped by {name} at step {err.step}"]
    if run.out is not None and err.partial is not None and err.partial.sizes.get("time", 0) >= 1:
        path = _partial_path(run.out)
        try:
            sim.save_or_rescue(_stamp(err.partial, run), path)
            parts.append(f"trajectory to step {int(err.partial['step'].values[-1])} kept in {path}")
        except sim.WriteFailed as failed:
            parts.append(f"trajectory to step {int(err.partial['step'].values[-1])} not kept in {path}: "
                         f"{failed.message}")
    elif run.out is not None:
        parts.append(f"nothing logged yet, {run.out} not written")
    if checkpoint is not None:
        parts.append(f"resume: {shlex.join(argv)}")
    else:
        parts.append(f"not resumable: start it with --out FILE.nc (checkpoints beside it) or --checkpoint DIR to "
                     f"resume later (tdyn train {paper or ''} ... --checkpoint DIR, then the same with --resume)"
                     .replace("  ", " "))
    click.echo("; ".join(parts), err=True)
    _exit_interrupted(130 if err.signum == signal.SIGINT else 143)


_PROGRESS_HELP = "Show a progress bar on stderr (only when it is a terminal) naming the step and its ETA."


def _progress_option(f):
    return click.option("--progress/--no-progress", "show_progress", default=True, show_default=True,
                        help=_PROGRESS_HELP)(f)


_quick_option = click.option("--quick/--full", default=True, show_default=True,
                             help="quick: small sizes (minutes on a laptop CPU); full: the papers' protocols "
                                  "(hours; meant for a GPU).")
_device_option = click.option("--device", default="auto", show_default=True,
                              help="Torch device for training: auto (cuda when available), cpu or cuda[:i].")


_cpu_core_hours_option = click.option(
    "--cpu-core-hours", type=click.FloatRange(min=0, min_open=True), default=CPU_CORE_HOURS, show_default=True,
    envvar="TDYN_CPU_CORE_HOURS", metavar="H",
    help="Full mode: a claim map estimated to cost more than H CPU core-hours is not run on a CPU (untested, with "
         "its cost) unless --device cuda or --ray runs it (env TDYN_CPU_CORE_HOURS).")


def _compare_report(row, ctx):
    """The paper's compare report under ``ctx``, under a progress bar (elapsed; ETA from the last run)."""
    from . import progress

    with progress.enabled(ctx.progress), progress.task(f"compare {row.name} ({ctx.mode})"):
        return row.slot("compare")(ctx)


@_command()
@_paper_arg
@_quick_option
@click.option("--json", "as_json", is_flag=True, help="Print the report (agreement and claims) as JSON.")
@_device_option
@_progress_option
def compare(paper, quick, as_json, device, show_progress):
    """Train inside the theory's regime; report agreement per observable and the paper's claims.

    Exit code 1 when an observable's agreement is outside its tolerance."""
    report = _compare_report(get(paper), RunContext(quick=quick, device=device, progress=show_progress))
    click.echo(json.dumps(report.to_json(), indent=2) if as_json else report.table())
    if not report.agreement_passed:
        sys.exit(1)


@_command()
@_paper_arg
@click.option("--quick/--full", default=True, show_default=True,
              help="Quick: the quick map at the seeds its test needs (>= 5); full: the full map, >= 12 seeds.")
@click.option("--json", "as_json", is_flag=True, help="Print every claim with its evidence (map points) as JSON.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "latex"]), default="text", show_default=True,
              help="text: a few lines per claim; json: every claim with its evidence (= --json); latex: a booktabs "
                   "table (claim, verdict, statistic with its interval, seeds, grade and test).")
@_device_option
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Local processes for the map cells.")
@click.option("--store", default=None, metavar="DIR",
              help="Keep the map cells in DIR/claims/<paper>/<claim> (default: under figures/out/<paper>/claims/store); "
                   "finished cells are not recomputed.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS", help="Run the map cells on a Ray cluster (or 'auto').")
@_cpu_core_hours_option
@_progress_option
def claims(paper, quick, as_json, fmt, device, workers, store, ray_address, cpu_core_hours, show_progress):
    """Decide the paper's claims over seeds inside its regime, with their validity maps."""
    from .claims import NoClaims, run_claims
    from .claims.report import claims_latex, claims_table

    row = get(paper)
    ctx = RunContext(quick=quick, device=device, progress=show_progress, cpu_core_hours=cpu_core_hours,
                     **_checked_sweep(store, workers, ray_address))
    try:
        results = run_claims(row.name, ctx)
    except NoClaims as err:
        click.echo(f"note: {err.message}", err=True)
        results = []
    if as_json or fmt == "json":
        click.echo(json.dumps([r.to_json() for r in results], indent=2))
    else:
        click.echo(claims_latex(results, row.name) if fmt == "latex" else claims_table(results, row.name))
    failed = sum(r.failed_cells for r in results)
    if failed:
        click.echo(f"error: claims: {failed} map cell(s) failed (see the stores' index.csv); rerun to retry them",
                   err=True)
        sys.exit(1)


_corpus_option = click.option("--corpus", default=None, metavar="DIR",
                              help="WikiText directory for the real-text figures (default ../shared/data/wikitext-2 "
                                   "beside the repository; 'wikitext-103' with the datasets package).")


def _checked_corpus(corpus, quick=None, papers=None) -> str | None:
    """``--corpus``, validated up front (one-line error, exit 2): its files and that it can feed the
    real-text protocols of ``papers`` (None: all; ``quick``; None: both presets)."""
    from figures.realtext import check_corpus_fits

    if corpus is not None:
        check_path("corpus", corpus)
        check_corpus_fits(corpus, quick, papers)
    return None if corpus is None else str(corpus)


def _text_sweep_options(f):
    """``--workers`` / ``--store`` / ``--ray`` of the protocols that are grids of runs (the real-text
    runs, Scan & Snap Fig. 6, the claims' validity maps): sweep cells."""
    f = click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
                     help="Run the grids of runs (real text, Scan & Snap Fig. 6, the claims' maps) on a Ray cluster "
                          "(an address or 'auto').")(f)
    f = click.option("--store", default=None, metavar="DIR",
                     help="Keep the grids' runs in DIR/<paper>, DIR/scan-snap-fig6 and DIR/claims/<paper>/<claim> (default: under "
                          "<outdir>); finished runs are not recomputed.")(f)
    return click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
                        help="Local processes for the grids of runs.")(f)


def _checked_sweep(store, workers, ray_address) -> dict:
    """``--store``/``--workers``/``--ray``, validated up front, as :class:`RunContext` fields."""
    import importlib.util

    from empirical.sweeps import check_ray_address

    if store is not None:
        check_outdir(store, "store")
    if ray_address is not None:
        check_ray_address(ray_address)  # an address nobody answers: seconds, not ray.init's minutes
    if ray_address is not None and importlib.util.find_spec("ray") is None:
        raise ConfigError("ray", "ray is not installed (from the checkout: pip install -c constraints.txt -e \".[cluster]\")")
    return {"store": None if store is None else str(store), "workers": workers, "ray": ray_address}


@_command()
@_paper_arg
@_quick_option
@click.option("--outdir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Write the figures (PNG + PDF), tables and report.json here; default figures/out/<paper's "
                   "module name>/ inside the checkout (the paper name with - as _: figures/out/scan_snap/).")
@_device_option
@_corpus_option
@_text_sweep_options
@_cpu_core_hours_option
@_progress_option
@click.option("--progress-lines", is_flag=True, hidden=True,
              help="Report progress as lines on stderr for a parent process (tdyn reproduce --jobs).")
def figures(paper, quick, outdir, device, corpus, workers, store, ray_address, cpu_core_hours, show_progress,
            progress_lines):
    """Regenerate a paper's figures (PNG and PDF) into figures/out/<module>/ (scan-snap: figures/out/scan_snap/)."""
    from contextlib import nullcontext

    from . import progress

    row = get(paper)
    outdir = check_outdir(outdir)
    lines = progress.reporting(sys.stderr) if progress_lines else nullcontext()
    ctx = RunContext(quick=quick, device=device, corpus=_checked_corpus(corpus, quick, (row.name,)),
                     cpu_core_hours=cpu_core_hours, progress=show_progress or progress_lines, outdir=outdir,
                     **_checked_sweep(store, workers, ray_address))
    with progress.enabled(ctx.progress), lines:
        _figures(row, ctx)


def _figures(row, ctx):
    from .make import make_figures

    written = make_figures(row.name, ctx.paper_outdir(row.module), ctx)
    for p in written:
        click.echo(f"wrote {p}")
    _print_lint(written)


def _print_lint(written):
    """The figure-style problems the collector recorded (figures.style.lint), one line each, on stderr."""
    for name, problems in getattr(written, "problems", {}).items():
        for p in problems:
            click.echo(f"lint: {name}: {p}", err=True)


def _sweep_epilog() -> str:
    """The sweep help's list of what can be swept: each paper's config fields."""
    import dataclasses
    import textwrap

    lines = ["\b", "KEY (--grid KEY=..., --set KEY=...) is a field of the paper's config:"]
    for row in PAPERS.values():
        names = ", ".join(f.name for f in dataclasses.fields(row.Config) if not f.name.startswith("_"))
        lines += textwrap.wrap(f"{row.name}: {names}", width=100, initial_indent="  ", subsequent_indent="      ")
    return _papers_epilog() + "\n\n" + "\n".join(lines)


@main.command(epilog=_sweep_epilog())
@_paper_arg
@click.option("--grid", "grid", multiple=True, required=True, metavar="KEY=V1,V2,...",
              help="A swept config field (repeatable; the sweep is their product); the fields are listed below.")
@click.option("--seeds", type=click.IntRange(min=0), default=0, show_default=True,
              help="Repeat each point for seed = 0 .. N-1.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Local processes.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS", help="Run on a Ray cluster (or 'auto').")
@click.option("--store", default="sweeps", show_default=True, metavar="DIR",
              help="Result store (NetCDF per cell + index.csv); finished cells are skipped.")
@click.option("--kind", "job", type=click.Choice(["train", "ode", "text"]), default="train", show_default=True,
              help="train: the paper's training runs; ode: its ODE solves; text: its real-text run "
                   "(JoMA Fig. 8, Scan & Snap Fig. 10, topic).")
@click.option("--variant", default=None, metavar="V",
              help=_variant_help() + " For the train cells, applied before --set.")
@click.option("--device", default="cpu", show_default=True, help="Torch device of the training cells (cpu or cuda).")
@click.option("--backend", type=click.Choice(["numba", "diffrax", "scipy"]), default="numba", show_default=True,
              help="ODE cells: the solver backend (as tdyn simulate --backend).")
@_set_option
@_large_option
@_corpus_option
@_progress_option
def sweep(paper, grid, seeds, workers, ray_address, store, job, variant, device, backend, assignments, allow_large,
          corpus, show_progress):
    """Run a grid of training runs (or ODE solves) into a resumable result store."""
    from . import progress as bars
    from .sweep import JOBS, plan
    from empirical.sweeps import check_store, run_cells

    corpus = _checked_corpus(corpus, papers=(get(paper).name,))  # --kind text: the corpus of the real-text runs
    cells = plan(paper, grid, seeds=seeds, overrides=assignments, job=job, variant=variant, device=device,
                 backend=backend, allow_large=allow_large, corpus=corpus)
    check_outdir(store, "store")
    check_store(store)

    where = {c.key: ", ".join(f"{k}={v}" for k, v in c.swept.items()) or c.key[:10] for c in cells}

    def progress(key, status, err):  # the cell by its swept values (the key only where none vary)
        bars.echo(f"{where.get(key, key)}: {status}{': ' + err if err else ''}")

    with bars.enabled(show_progress):
        try:
            idx = run_cells(JOBS[job], cells, store, workers=workers, ray=ray_address, progress=progress,
                            bar=bars.cell_bar if show_progress else None)
        except BaseException:  # an interrupt: say what finished (stdout), then the one error line
            _report_finished(store)
            raise
    n_ok, n = int((idx["status"] == "ok").sum()), len(idx)
    click.echo(f"{n_ok}/{n} cells done in {Path(store) / 'index.csv'}")
    if n_ok < n:
        click.echo(f"error: sweep: {n - n_ok} cell(s) failed (see index.csv); rerun to retry them", err=True)
        sys.exit(1)


def _report_finished(store) -> None:
    """``k/n cells done in STORE/index.csv`` from the index run_cells left (nothing if unreadable)."""
    from empirical.sweeps import read_index

    try:
        idx = read_index(store)
    except Exception:  # noqa: BLE001 - a report only
        return
    click.echo(f"{int((idx['status'] == 'ok').sum())}/{len(idx)} cells done in {Path(store) / 'index.csv'}")


@main.command()
@_quick_option
@_device_option
@_corpus_option
@_text_sweep_options
@_cpu_core_hours_option
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Papers made at the same time, each in its own process (the papers are independent; "
                   "`make figures` uses 2 on 2 cores).")
@_progress_option
def reproduce(quick, device, corpus, workers, store, ray_address, cpu_core_hours, jobs, show_progress):
    """Regenerate the figures of every paper in the table into figures/out/<module>/.

    Quick mode takes about 11 minutes on 2 CPU cores with --jobs 2 (see the README for each paper's time)."""
    from . import progress
    from .context import OUT_DIR

    check_outdir(str(OUT_DIR))
    ctx = RunContext(quick=quick, device=device, corpus=_checked_corpus(corpus, quick), cpu_core_hours=cpu_core_hours,
                     progress=show_progress, **_checked_sweep(store, workers, ray_address))
    with progress.enabled(ctx.progress):
        if jobs > 1:
            _reproduce_in_processes(ctx, jobs)
        else:
            papers = progress.bar(list(PAPERS.values()), desc="papers", unit="paper")
            for row in papers:
                papers.set_postfix_str(row.name)
                click.echo(f"== {row.name}")
                _figures(row, ctx)
    from .claims.report import claims_summary, read_claims, write_claims_md

    decided = read_claims(OUT_DIR, list(PAPERS.values()))
    click.echo(claims_summary(decided))
    click.echo(f"wrote {write_claims_md(decided, OUT_DIR / 'claims.md')}")


def _reproduce_in_processes(ctx, jobs):
    """``tdyn figures P`` for every paper of the table, ``jobs`` processes at a time, longest first;
    on a terminal a live bar per paper names the figure being made and its ETA (the children
    report their progress on stderr, :func:`figures.progress.run_children`); each paper's output is
    printed when it finishes. A paper that fails is reported in one line and the others finish;
    then exit 1."""
    from . import progress

    live = progress.active()

    def command(name):
        cmd = [sys.executable, "-m", "figures", "figures", name, "--quick" if ctx.quick else "--full",
               "--device", ctx.device, "--workers", str(ctx.workers), "--cpu-core-hours", repr(ctx.cpu_core_hours),
               "--progress-lines" if live else "--no-progress"]
        for flag, value in (("--corpus", ctx.corpus), ("--store", ctx.store), ("--ray", ctx.ray)):
            if value is not None:
                cmd += [flag, str(value)]
        return cmd

    # longest first (each row's measured quick_seconds): the least time to the last paper's end
    names = sorted(PAPERS, key=lambda n: -PAPERS[n].quick_seconds)
    failed = []

    def done(name, res):
        progress.echo(f"== {name}")
        progress.echo(res.stdout.rstrip("\n"))
        if res.stderr.strip():
            progress.echo(res.stderr.rstrip("\n"), err=True)
        if res.returncode != 0:
            failed.append(name)

    priors = {n: PAPERS[n].quick_seconds or None if ctx.quick else None for n in names}  # measured in quick mode only
    progress.run_children({n: command(n) for n in names}, priors, jobs, done)
    if failed:
        click.echo(f"error: reproduce: the figures of {', '.join(failed)} failed (output above)", err=True)
        sys.exit(1)


def _read_trajectory(path: str, field: str):
    """A saved trajectory, or ``ConfigError(field, ...)`` naming why it cannot be read."""
    import simulate

    p = check_path(field, path)
    if not p.is_file():
        raise ConfigError(field, f"no such file: {path}")
    try:
        return simulate.load(p)
    except Exception as err:  # noqa: BLE001 - any reader failure is the user's file
        raise ConfigError(field, f"not a NetCDF trajectory: {path} ({' '.join(str(err).split())[:200]})") from None


@main.command()
@click.argument("file", metavar="FILE.nc")
@click.option("--vs", "others", multiple=True, metavar="OTHER.nc",
              help="Overlay another trajectory (repeatable), e.g. an ODE solve over a training run.")
@click.option("--out", default=None, metavar="PNG",
              help="Write the figure here (and a PDF beside it); default FILE.png beside FILE.nc.")
@click.option("--observables", default=None, metavar="A,B,...",
              help="Only these observables (comma-separated); default every observable the files share.")
def plot(file, others, out, observables):
    """Plot the observables of a saved trajectory (tdyn simulate/train --out): SDE ensembles as
    bands, stacked runs as seed spreads, --vs overlays theory and practice."""
    from .plot import plot_file

    _read_trajectory(file, "file")
    if out is None:  # FILE.png and FILE.pdf beside FILE.nc
        check_path("file", file, derived=(".png", ".pdf"))
    for o in others:
        _read_trajectory(o, "vs")
    if out is not None:
        if Path(out).suffix.lower() != ".png":
            raise ConfigError("out", f"expected a .png file name, got {out!r}")
        check_path("out", out, derived=(".pdf",))
        if Path(out).is_dir():
            raise ConfigError("out", f"is a directory: {out}")
        check_writable_dir("out", Path(out).parent)
    names = [n.strip() for n in observables.split(",") if n.strip()] if observables else None
    click.echo(f"wrote {plot_file(file, others, out, names)} (+ .pdf)")


@main.command("new-paper")
@click.argument("name")
@click.option("--dir", "directory", default=".", show_default=True, metavar="DIR",
              help="Write the package into DIR/NAME (which must not exist).")
def new_paper(name, directory):
    """Write a working plugin package for paper NAME: theory, empirical and figures modules, a claims
    registry, tests of the paper contract and a pyproject.toml whose `tdyn.papers` entry point
    registers its row. Then: pip install -e NAME; tdyn derive NAME; tdyn figures NAME --quick."""
    from .newpaper import write_paper

    target = write_paper(name, directory)
    click.echo(f"wrote {target}/ (a working example to replace piece by piece: docs/adding-a-paper.md)\n"
               f"next: pip install -e {target} && tdyn derive {name} && tdyn figures {name} --quick && "
               f"pytest {target}")


if __name__ == "__main__":  # pragma: no cover
    main()
