"""The one collector of a paper's outputs: :func:`make_figures` runs the row's figure functions,
its claims step and its compare report into one folder, under one :class:`~figures.context.RunContext`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from .claims.report import write_claim_outputs
from .context import RunContext
from .core import collecting, write_output

__all__ = ["make_figures", "wants_context"]


def wants_context(fig: Callable) -> bool:
    """Whether the figure function ``fig`` declares a ``ctx`` keyword (the run's
    :class:`~figures.context.RunContext`: :func:`make_figures` passes it to those that do)."""
    import inspect

    try:
        return "ctx" in inspect.signature(fig).parameters
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return False


def make_figures(paper: str, outdir: str | os.PathLike, ctx: RunContext | None = None, *, quick: bool | None = None,
                 device: str | None = None, report: bool = True) -> list[Path]:
    """Run every figure function of ``paper``'s row (its ``figures`` slot: a sequence of
    ``fig_x(outdir, quick, *, device)``; one that also declares a ``ctx`` keyword is handed the run's
    :class:`~figures.context.RunContext`, for its corpus and stores) into ``outdir``, with a progress
    bar naming each; the claims' outputs (``claims(ctx)``); then, with ``report``, the compare report
    (``compare(ctx)``) as ``outdir/report.json``. ``quick``/``device`` override ``ctx``'s; the
    context's ``outdir`` is ``outdir`` (where the claims' default store goes). Returns every file
    written, in order (a :class:`Collected`: its ``problems`` hold each figure's lint problems)."""
    from . import progress
    from .papers import get

    row = get(paper)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    # one context for every step, so the steps' per-process caches, keyed by it, share their runs
    ctx = RunContext.of(ctx, quick=quick, device=device).replace(outdir=str(out))
    figs = row.slot("figures")
    with collecting() as written:
        steps = progress.bar(total=len(figs) + (row.claims is not None) + bool(report), desc=paper, unit="fig")
        try:
            for fig in figs:
                steps.set_postfix_str(getattr(fig, "__name__", str(fig)))
                fig(out, ctx.quick, device=ctx.device, **({"ctx": ctx} if wants_context(fig) else {}))
                steps.update(1)
            if row.claims is not None:  # the claims' validity maps, tables and claims.json (figures.claims.report)
                steps.set_postfix_str("claims (validity maps)")
                write_claim_outputs(row.slot("claims")(ctx.replace(progress=False)), out)  # under the steps' bar
                steps.update(1)
            if report:
                steps.set_postfix_str("compare (report.json)")
                rep = row.slot("compare")(ctx)
                write_output(out / "report.json", lambda tmp: Path(tmp).write_text(json.dumps(rep.to_json(), indent=2)))
                steps.update(1)
        finally:
            steps.close()
    return written
