"""Resource estimates: refuse a run that cannot finish *before* it allocates or computes.

Every ``tdyn`` command (and the sweep runner) calls :func:`check` right after the config is built.
An estimate is a list of :class:`Term` s — ``(resource, amount, field)`` — from the generic rules
below plus the paper's estimator in :data:`ESTIMATORS` (keyed by paper name, reading config
fields with :func:`getattr` so a renamed field only drops its term). A resource whose total
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

__all__ = ["Term", "LIMITS", "ESTIMATORS", "estimate", "check", "register_estimator", "COMMANDS"]

GiB = 2**30
F64 = 8  # bytes per float64 / int64

COMMANDS = ("derive", "simulate", "sde", "train")


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


Estimator = Callable[[Any, str, int], list[Term]]
ESTIMATORS: dict[str, Estimator] = {}


def register_estimator(paper: str):
    """Decorator: ``fn(config, command, paths) -> list[Term]`` is the estimate of ``paper``."""

    def deco(fn: Estimator) -> Estimator:
        ESTIMATORS[paper] = fn
        return fn

    return deco


def _f(config: Any, name: str, default: float = 0.0) -> float:
    """A numeric config field as a float (``default`` when the config has no such field).
    Python ints of any size convert (inf beyond float range), so estimates never overflow."""
    v = getattr(config, name, default)
    try:
        return float(v)
    except (OverflowError, TypeError, ValueError):
        return math.inf


def _horizon(config: Any, paper: str) -> float:
    """The ODE time at the last step (the config's ``ode_time``, else the paper's known unit)."""
    steps = _f(config, "steps", 1)
    try:
        return abs(float(config.ode_time(int(steps)))) if math.isfinite(steps) else math.inf
    except (NotImplementedError, AttributeError, TypeError, ValueError, OverflowError):
        pass
    if paper == "joma":  # t = lr * step (spec papers/joma.md §2)
        return steps * _f(config, "lr", 1.0)
    if paper == "scan-snap":  # per-sample time steps / (1 - momentum)
        m = _f(config, "momentum") if getattr(config, "optimizer", "sgd") == "sgd" else 0.0
        return steps / max(1.0 - m, 1e-12)
    return steps


def _generic(config: Any, paper: str, command: str, paths: int, dt: float) -> list[Term]:
    steps, every = _f(config, "steps", 1), max(_f(config, "log_every", 1), 1.0)
    points = steps / every + 2
    terms = [Term("log_points", points, "steps")]
    if command == "train":
        terms.append(Term("train_steps", steps, "steps"))
    lead = max(paths, 1) if command == "sde" else 1
    terms.append(Term("memory", 64 * F64 * points * lead, "steps"))  # ~64 logged variables
    if command == "sde":
        n = _horizon(config, paper) / dt
        field = "lr" if paper == "joma" and _f(config, "lr") > 1 else "steps"
        terms.append(Term("sde_steps", n, field))
        terms.append(Term("sde_path_steps", n * max(paths, 1), field))
    return terms


def estimate(paper: str, config: Any, command: str, *, paths: int = 0, dt: float = 1.0) -> dict[str, list[Term]]:
    """All terms of ``command`` (one of :data:`COMMANDS`) grouped by resource."""
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {COMMANDS}, got {command!r}")
    terms = _generic(config, paper, command, paths, dt)
    if paper in ESTIMATORS:
        terms += ESTIMATORS[paper](config, command, max(paths, 1))
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


def check(paper: str, config: Any, command: str, *, paths: int = 0, dt: float = 1.0, allow_large: bool = False,
          limits: Mapping[str, float] | None = None) -> dict[str, float]:
    """Raise ``ConfigError(field, ...)`` when an estimate exceeds its limit (unless ``allow_large``);
    return the totals per resource."""
    limits = {**LIMITS, **(limits or {})}
    totals = {}
    for resource, terms in estimate(paper, config, command, paths=paths, dt=dt).items():
        total = sum(t.amount for t in terms)
        if math.isnan(total):
            total = math.inf
        totals[resource] = total
        limit = limits.get(resource, math.inf)
        if total > limit and not allow_large:
            worst = max(terms, key=lambda t: t.amount if not math.isnan(t.amount) else math.inf)
            lim = f"{limit / GiB:.3g} GiB" if resource == "memory" else f"{limit:.3g}"
            raise ConfigError(worst.field, f"needs an estimated {_fmt(resource, total)} "
                                           f"(limit {lim}; pass --allow-large to run anyway)")
    return totals


# ------------------------------------------------------------------------------------------------
# Per-paper estimators (the fields that size each paper's arrays and symbolic systems)
# ------------------------------------------------------------------------------------------------
@register_estimator("scb")
def _scb(c, command, paths):
    N, T, B = _f(c, "N", 3), _f(c, "T", 16), _f(c, "batch", 1)
    terms = [Term("memory", 6 * F64 * N * N, "N")]  # P, P_tilde, Sigma, ... (N x N)
    if command == "derive":
        terms.append(Term("symbolic_states", 2 + 2 * N, "N"))  # general_system(N): 2 + 2N
    if command == "train":
        terms += [Term("memory", 4 * F64 * B * T, "batch" if B > T else "T"),  # tokens, gathers
                  Term("memory", 3 * F64 * B * N, "batch" if B > N else "N"),  # predictions, one-hots
                  Term("memory", 2 * F64 * T * N, "T" if T > N else "N")]      # A (T x N) and grads
    if command == "sde":  # the full (V, A) space, noise estimated from 64 Monte-Carlo samples
        dim = N * N + T * N
        terms.append(Term("memory", F64 * paths * dim * 64 * 2, "N" if N > T else "T"))
    return terms


@register_estimator("topic")
def _topic(c, command, paths):
    D = _f(c, "T", 10) * _f(c, "v", 10) + 4  # vocabulary (+ MASK and the code's specials)
    n_tok, B = max(_f(c, "N", 1), _f(c, "N_max", 0)), _f(c, "batch", 1)
    terms = [Term("memory", 4 * F64 * D * D, "v" if _f(c, "v") > _f(c, "T") else "T")]
    if command == "train":
        terms += [Term("memory", 3 * F64 * B * n_tok * D, "N" if n_tok > B else "batch"),
                  Term("memory", F64 * _f(c, "n_docs") * n_tok, "n_docs")]
    return terms


@register_estimator("scan-snap")
def _scan_snap(c, command, paths):
    U, C = _f(c, "num_unique_per_next", 1), _f(c, "num_common", 0)
    K = _f(c, "num_last", 1) * _f(c, "num_next_per_last", 1)
    M_in = C + K * U + _f(c, "num_last", 1) + K
    B, T = _f(c, "batch", 1), _f(c, "T", 1)
    big = "num_common" if C >= K * U else "num_unique_per_next"
    terms = [Term("memory", 10 * F64 * M_in * M_in, big),  # Y (M_in x M_out), Z (M_in x M_in), task P
             Term("memory", 2 * F64 * K * M_in, big)]
    if command in ("derive", "simulate"):
        terms.append(Term("symbolic_states", 4 * U + 3, "num_unique_per_next"))  # SymmetricLayout
    if command == "train":
        terms += [Term("memory", 4 * F64 * B * M_in, "batch" if B > M_in else big),
                  Term("memory", (2 * F64 * B * T) if getattr(c, "path", "counts") == "sequences" else 0.0, "T")]
    return terms


@register_estimator("joma")
def _joma(c, command, paths):
    Mc, K, N, d, B = (_f(c, k, 1) for k in ("Mc", "K", "N", "d", "batch"))
    big_mc = "Mc" if Mc >= d else "d"
    terms = [Term("memory", 4 * F64 * (N + Mc) * d, big_mc), Term("memory", 4 * F64 * d * K, "d")]
    if command in ("derive", "simulate", "sde"):
        terms.append(Term("symbolic_states", Mc * K + K * N + Mc, "Mc" if Mc >= N else "N"))  # block + Theorem 2
    if command == "sde":
        terms.append(Term("memory", F64 * paths * (Mc * K + K * N) * max(B, 1) * 4, "Mc"))
    if command == "train":
        terms.append(Term("memory", 4 * F64 * B * Mc * d, big_mc))
        depth, br = _f(c, "depth", 0), _f(c, "branching", 1)
        if getattr(c, "kind", "") == "hblt" or depth > 0:
            terms.append(Term("memory", F64 * min(br ** min(depth, 400), 1e300) * 8, "depth"))  # tree leaves
    return terms
