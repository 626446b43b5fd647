"""Resource estimates: refuse a run that cannot finish *before* it allocates or computes.

Every ``tdyn`` command (and the sweep runner) calls :func:`check` right after the config is built.
An estimate is a list of :class:`Term` s — ``(resource, amount, field)`` — from the generic rules
below plus the paper's own estimator (the ``estimate`` slot of its row in the paper table:
``estimate(config, command, paths) -> list[Term]``, beside the paper's Config). A resource whose total
exceeds its limit in :data:`LIMITS` is a ``ConfigError`` naming the field of the largest term:

    error: N: needs an estimated 745 GiB of memory (limit 11.5 GiB; pass --allow-large to run anyway)

Limits (documented in the README, overridable with ``--allow-large`` / ``allow_large=True``):

===================  =====================================================================
``memory``           bytes held at once (arrays of the task, model, a minibatch, the
                     logged trajectory); default: half the machine's RAM, at least 4 GiB
``symbolic_states``  states of a system built and differentiated by sympy (derive/simulate):
                     600 — sympy's cost grows ~cubically, 27 states take seconds
``train_steps``      optimiser steps of one training run: 10^8
``log_points``       logged time points (``steps / log_every``): 10^7
``sde_steps``        Euler–Maruyama steps per path (ODE horizon / dt): 10^7
``sde_path_steps``   paths x Euler steps of an ensemble: 10^9
===================  =====================================================================

The estimates are deliberately rough (factors of a few): they exist to stop a 10^8-sized typo,
not to predict peak memory.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["Term", "LIMITS", "estimate", "check", "COMMANDS", "F64", "field_value"]

GiB = 2**30
F64 = 8  # bytes per float64 / int64

COMMANDS = ("derive", "simulate", "sde", "train")
#: the fixed memory of one run beyond its arrays (the trajectory dataset's bookkeeping, Python objects)
_BOOKKEEPING = 16 * 2**20


def _default_memory_limit() -> int:
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        phys = 16 * GiB
    return max(4 * GiB, phys // 2)


LIMITS: dict[str, float] = {
    "memory": _default_memory_limit(),
    "symbolic_states": 600,
    "train_steps": 1e8,
    "log_points": 1e7,
    "sde_steps": 1e7,
    "sde_path_steps": 1e9,
}


@dataclass(frozen=True)
class Term:
    """``amount`` of ``resource`` (bytes for memory, counts otherwise) caused by config ``field``."""

    resource: str
    amount: float
    field: str


def field_value(config: Any, name: str, default: float = 0.0) -> float:
    """A numeric config field as a float (``default`` when the config has no such field).
    Python ints of any size convert (inf beyond float range), so estimates never overflow."""
    v = getattr(config, name, default)
    try:
        return float(v)
    except (OverflowError, TypeError, ValueError):
        return math.inf


def _horizon(config: Any) -> float:
    """The ODE time at the last step: the config's own ``ode_time`` (time lives in the Config)."""
    steps = field_value(config, "steps", 1)
    if not math.isfinite(steps):
        return math.inf
    try:
        return abs(float(config.ode_time(int(steps))))
    except OverflowError:
        return math.inf


def _generic(config: Any, paper: str, command: str, paths: int, dt: float) -> list[Term]:
    steps, every = field_value(config, "steps", 1), max(field_value(config, "log_every", 1), 1.0)
    points = steps / every + 2
    terms = [Term("log_points", points, "steps"), Term("memory", _BOOKKEEPING, "steps")]
    if command == "train":
        terms.append(Term("train_steps", steps, "steps"))
    lead = max(paths, 1) if command == "sde" else 1
    terms.append(Term("memory", 64 * F64 * points * lead, "steps"))  # ~64 logged variables
    if command == "sde":
        n = _horizon(config) / (_step_time(config) if dt is None else dt)
        terms.append(Term("sde_steps", n, "steps"))
        terms.append(Term("sde_path_steps", n * max(paths, 1), "steps"))
    return terms


def _step_time(config: Any) -> float:
    """The Euler–Maruyama step of a paper's SDE: one optimiser step in ODE time
    (``ode_time(1) - ode_time(0)``: ``lr`` for JoMA, 1 for SCB), as the SDE models use; 1.0 for a
    config without a usable ``ode_time``. (Scan & Snap with momentum takes ``ceil(1/(1 - mu))``
    Euler steps per optimiser step: a factor of a few, within the estimates' roughness.)"""
    try:
        dt = float(config.ode_time(1)) - float(config.ode_time(0))
    except Exception:  # noqa: BLE001 - an estimate must not fail where the run would not
        return 1.0
    return dt if math.isfinite(dt) and dt > 0 else 1.0


def estimate(paper: str, config: Any, command: str, *, paths: int = 0, dt: float | None = None,
             estimator: Callable[[Any, str, int], list[Term]] | None = None) -> dict[str, list[Term]]:
    """All terms of ``command`` (one of :data:`COMMANDS`) grouped by resource: the generic rules
    plus ``estimator(config, command, paths)`` (the paper row's ``estimate`` slot). ``dt``: the SDE's
    Euler step in ODE time (default: one optimiser step of ``config``, :func:`_step_time`)."""
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {COMMANDS}, got {command!r}")
    terms = _generic(config, paper, command, paths, dt)
    if estimator is not None:
        terms += estimator(config, command, max(paths, 1))
    out: dict[str, list[Term]] = {}
    for t in terms:
        out.setdefault(t.resource, []).append(t)
    return out


def _fmt(resource: str, amount: float) -> str:
    if resource == "memory":
        return f"{amount / GiB:.3g} GiB of memory"
    names = {"symbolic_states": "symbolic states (sympy)", "train_steps": "optimiser steps",
             "log_points": "logged time points", "sde_steps": "Euler steps per path",
             "sde_path_steps": "path-steps"}
    return f"{amount:.3g} {names.get(resource, resource)}"


def check(paper: str, config: Any, command: str, *, paths: int = 0, dt: float | None = None, allow_large: bool = False,
          limits: Mapping[str, float] | None = None,
          estimator: Callable[[Any, str, int], list[Term]] | None = None) -> dict[str, float]:
    """Raise ``ConfigError(field, ...)`` when an estimate exceeds its limit (unless ``allow_large``);
    return the totals per resource. The field named is that of the largest term — or ``paths``
    where the same command with one path would fit (the ensemble's size is what is too large)."""
    limits = {**LIMITS, **(limits or {})}
    totals = {}
    single = None
    for resource, terms in estimate(paper, config, command, paths=paths, dt=dt, estimator=estimator).items():
        total = sum(t.amount for t in terms)
        if math.isnan(total):
            total = math.inf
        totals[resource] = total
        limit = limits.get(resource, math.inf)
        if total > limit and not allow_large:
            worst = max(terms, key=lambda t: t.amount if not math.isnan(t.amount) else math.inf)
            field = worst.field
            if paths > 1:
                if single is None:
                    single = estimate(paper, config, command, paths=1, dt=dt, estimator=estimator)
                one = sum(t.amount for t in single.get(resource, ()))
                if one <= limit:
                    field = "paths"
            lim = f"{limit / GiB:.3g} GiB" if resource == "memory" else f"{limit:.3g}"
            raise ConfigError(field, f"needs an estimated {_fmt(resource, total)} "
                                           f"(limit {lim}; pass --allow-large to run anyway)")
    return totals
