"""The paper contract: what every row of the table must satisfy, as plain functions over a row.

tdyn's tests run them over every row of the table (``tests/figures/test_papers.py``); a package
written by ``tdyn new-paper`` runs the same functions over its own row in its tests, so a plugin is
held to the contract tdyn's own papers are. Each check raises :class:`ContractError` (an
``AssertionError``: pytest shows it as a failed assertion) naming the row, slot and variant.

* :func:`check_slots` — every slot filled (and resolvable, with the slot's signature) or explained;
* :func:`time_cases` / :func:`check_time_axis` — for every variant, the problem's output times, the
  SDE's grid and a tiny training run's logged times are exactly ``config.ode_times()`` (time lives
  in the Config and nowhere else);
* :func:`check_derivation` — ``systems(config)`` gives ReducedSystems whose right-hand sides
  evaluate to finite numbers of the state's shape at the problem's initial state.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence

import numpy as np

from theory.errors import ConfigError

from .papers import SLOTS, Paper

__all__ = ["ContractError", "TINY", "check_slots", "time_cases", "check_time_axis", "check_train_seeds",
           "check_derivation"]

#: a tiny run: the logging grid's last interval is shorter (10 is not a multiple of 3), so a slot that
#: builds its own grid (linspace, arange) instead of ``config.ode_times()`` shows up
TINY = ("steps=10", "log_every=3")
#: the keywords every train slot takes (``empirical.trainer``'s run signature)
TRAIN_KEYWORDS = {"device", "variant", "progress", "checkpoint", "checkpoint_every", "resume"}


class ContractError(AssertionError):
    """A row breaks the paper contract (the message names the row and slot)."""


def _require(ok: bool, row: Paper, what: str) -> None:
    if not ok:
        raise ContractError(f"{row.name}: {what}")


def check_slots(row: Paper) -> None:
    """Every slot filled or explained in ``missing``; a filled one resolves to a callable (the
    figures slot: a non-empty sequence of ``fig_x(outdir, quick, *, device)``); compare takes
    ``quick`` and ``device``; train takes :data:`TRAIN_KEYWORDS`."""
    for slot in SLOTS:
        if getattr(row, slot) is None:
            _require(bool(row.missing.get(slot)), row, f"empty slot {slot} without a reason")
            try:
                row.slot(slot)
            except ConfigError:
                continue
            raise ContractError(f"{row.name}: empty slot {slot} resolves")
        value = row.slot(slot)
        if slot == "figures":
            _require(isinstance(value, Sequence) and not isinstance(value, str) and len(value) > 0, row,
                     "figures: not a non-empty sequence of figure functions")
            for fig in value:
                params = list(inspect.signature(fig).parameters.values())
                positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
                _require(len(positional) >= 2 and any(
                    p.name == "device" and p.kind is inspect.Parameter.KEYWORD_ONLY for p in params),
                    row, f"figures: {fig.__name__} is not fig(outdir, quick, *, device)")
                _require(all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params if p.name == "ctx"), row,
                         f"figures: {fig.__name__}'s ctx (the RunContext make_figures hands it) is not keyword-only")
        else:
            _require(callable(value), row, f"slot {slot} is not callable")
    for slot in ("compare", "claims"):  # called as slot(ctx): the RunContext first, quick/device may override it
        if getattr(row, slot) is None:
            continue
        params = inspect.signature(row.slot(slot)).parameters
        first = next(iter(params.values()), None)
        _require(first is not None and first.name == "ctx" and {"quick", "device"} <= set(params), row,
                 f"{slot} is not {slot}(ctx, *, quick, device, ...) (a RunContext first)")
    missing = TRAIN_KEYWORDS - set(inspect.signature(row.slot("train")).parameters)
    _require(not missing, row, f"train does not take {sorted(missing)}")


def time_cases(row: Paper) -> Iterator[tuple[str | None, str]]:
    """``(variant, slot)`` for every variant (``None`` without variants) and filled time slot."""
    for variant in row.variants or (None,):
        for slot in ("problem", "sde", "train"):
            if getattr(row, slot) is not None:
                yield variant, slot


def _times(row: Paper, slot: str, cfg) -> np.ndarray:
    from theory import Problem

    if slot == "problem":
        problem = row.slot("problem")(cfg)
        _require(isinstance(problem, Problem), row, "problem does not return a theory.Problem")
        return np.asarray(problem.t)
    if slot == "sde":
        _, t = row.slot("sde")(cfg)
        return np.asarray(t)
    traj = row.slot("train")(cfg, device="cpu", variant=row.train_variant(cfg), progress=False)
    return traj["time"].values


def check_time_axis(row: Paper, variant: str | None, slot: str) -> None:
    """The slot's times for a :data:`TINY` config of ``variant`` are exactly ``config.ode_times()``;
    a slot that does not serve the variant must say so with ``ConfigError('variant', ...)``."""
    cfg = row.make_config(TINY, variant=variant)
    steps = cfg.log_steps()
    _require(steps[0] == 0 and steps[-1] == cfg.steps and bool(np.all(np.diff(steps) > 0)), row,
             f"log_steps() of {TINY} is not 0, ..., steps increasing")
    try:
        times = _times(row, slot, cfg)
    except ConfigError as err:
        _require(err.field == "variant" and variant is not None and repr(variant) in str(err), row,
                 f"{slot} ({variant}) raised {err} instead of naming the variant it does not serve")
        return
    _require(times.shape == np.shape(cfg.ode_times()) and np.array_equal(times, cfg.ode_times()), row,
             f"{slot} ({variant}): times {times[:4]}... are not config.ode_times()")


def check_train_seeds(row: Paper, variant: str | None, seeds=(0, 3)) -> None:
    """A row's optional ``train_seeds`` equals its train slot seed by seed on a :data:`TINY` config
    of ``variant`` (every observable both log, to 1e-10 relative), or refuses the config with a
    ``ConfigError`` (then the claims train seed by seed)."""
    if row.train_seeds is None:
        return
    cfg = row.make_config(TINY, variant=variant)
    try:
        batched = row.slot("train_seeds")(cfg, seeds=list(seeds), device="cpu")
    except ConfigError:
        return
    _require("seed" in batched.dims and batched["seed"].values.tolist() == list(seeds), row,
             f"train_seeds ({variant}): no seed dim holding {list(seeds)}")
    for i, s in enumerate(seeds):
        one = row.slot("train")(cfg.replace(seed=int(s)), device="cpu", variant=row.train_variant(cfg), progress=False)
        shared = [k for k in one.data_vars if k in batched.data_vars]
        _require(bool(shared), row, f"train_seeds ({variant}): logs none of the train slot's observables")
        for k in shared:
            a, b = np.asarray(batched[k].isel(seed=i).values if "seed" in batched[k].dims else batched[k].values,
                              float), np.asarray(one[k].values, float)
            _require(a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-10, atol=1e-12)), row,
                     f"train_seeds ({variant}): seed {s}'s {k} differs from the train slot's run")


def check_derivation(row: Paper) -> None:
    """``systems(config)`` returns ReducedSystems; the problem's system evaluates, at its initial
    state and parameters, to a finite right-hand side of the state's shape."""
    from theory import ReducedSystem

    cfg = row.make_config()
    systems = row.slot("systems")(cfg)
    _require(len(systems) > 0 and all(isinstance(s, ReducedSystem) for s in systems), row,
             "systems(config) is not a non-empty list of ReducedSystem")
    problem = row.slot("problem")(cfg)
    y0, p = problem.system.state_vector(problem.y0), problem.system.parameter_vector(problem.params)
    dy = np.asarray(problem.system.to_numpy()(0.0, y0, p))
    _require(dy.shape == y0.shape and bool(np.all(np.isfinite(dy))), row,
             f"the problem's right-hand side at y0 has shape {dy.shape} (state {y0.shape}) or is not finite")
