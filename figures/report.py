"""``Report``: one shape for every paper's theory-vs-practice comparison.

A Report holds, per observable, the relative L2 error between the trained network and the theory
(with a tolerance, or ``None`` for a diagnostic that is reported but not judged) and
``agreement_passed`` (the observables only — never the claims' verdict), where agreement breaks,
and the paper's **headline claims**: :class:`figures.claims.ClaimResult` (decided over seeds inside
the paper's regime, ``docs/claims.md``) or, until a paper's registry exists, the older single-run
``Claim`` (``holds`` a measured bool with its numbers in ``evidence``). ``to_json`` gives the same
top-level keys for all papers; ``table`` is what ``tdyn compare`` prints (evidence only in JSON).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulate.trajectory import jsonable

__all__ = ["Observable", "Claim", "Break", "Report", "REPORT_KEYS", "BREAK_KEYS"]

#: the keys of every ``where_agreement_breaks`` row, for every paper
BREAK_KEYS = ("factor", "setting", "rel_l2", "within_tolerance", "note")


def _json(v: Any) -> Any:
    return jsonable(v, finite=True)

REPORT_KEYS = ("paper", "regime", "agreement_passed", "observables", "claims", "where_agreement_breaks", "details")


@dataclass(frozen=True)
class Observable:
    """Agreement of one named observable: ``rel_l2`` (practice vs theory) against ``tolerance``
    (``None``: a diagnostic, reported but not judged)."""

    name: str
    rel_l2: float
    tolerance: float | None = None
    note: str = ""

    @property
    def passed(self) -> bool | None:
        if self.tolerance is None:
            return None
        return bool(math.isfinite(self.rel_l2) and self.rel_l2 <= self.tolerance)

    def to_json(self) -> dict[str, Any]:
        return _json({"rel_l2": self.rel_l2, "tolerance": self.tolerance, "passed": self.passed,
                          "note": self.note})


@dataclass(frozen=True)
class Claim:
    """A headline claim of the paper, decided by measurement.

    name:      identifier (``l1_beats_sgd``);
    statement: the claim as the paper makes it;
    holds:     the measured verdict;
    evidence:  the numbers it was decided on (name -> number, or short lists of numbers);
    regime:    the setting measured (sizes, learning rates, seeds).
    """

    name: str
    statement: str
    holds: bool
    evidence: Mapping[str, Any]
    regime: str

    def to_json(self) -> dict[str, Any]:
        return _json({"name": self.name, "statement": self.statement, "holds": bool(self.holds),
                          "evidence": dict(self.evidence), "regime": self.regime})


@dataclass(frozen=True)
class Break:
    """One row of *where agreement breaks*, the same keys for every paper.

    factor:           what is varied or which condition is examined (``"batch"``,
                      ``"horizon"``, ``"Assumption 1 window"``);
    setting:          the values that define the row (``{"batch": 16, "lr": 0.05}``);
    rel_l2:           observable -> relative L2 error (practice vs theory) at this setting; other
                      numbers that locate the break (a time, a drift) go in ``setting``;
    within_tolerance: whether every judged ``rel_l2`` is within its tolerance (``None``: not judged);
    note:             one line for a reader.
    """

    factor: str
    setting: Mapping[str, Any]
    rel_l2: Mapping[str, Any]
    within_tolerance: bool | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return _json({"factor": self.factor, "setting": dict(self.setting), "rel_l2": dict(self.rel_l2),
                      "within_tolerance": self.within_tolerance, "note": self.note})


@dataclass
class Report:
    """One paper's comparison: observables (judged or diagnostic), claims, where agreement breaks."""

    paper: str
    regime: str
    observables: list[Observable] = field(default_factory=list)
    claims: list[Any] = field(default_factory=list)  # ClaimResult, or Claim until the paper's registry exists
    where_agreement_breaks: list[Break] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def agreement_passed(self) -> bool:
        """Every judged observable within its tolerance (the observables only: claims are decided
        separately, each with its own verdict)."""
        return all(o.passed is not False for o in self.observables)

    def observable(self, name: str) -> Observable:
        for o in self.observables:
            if o.name == name:
                return o
        raise KeyError(name)

    def claim(self, name: str) -> Claim:
        for c in self.claims:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "paper": self.paper,
            "regime": self.regime,
            "agreement_passed": self.agreement_passed,
            "observables": {o.name: o.to_json() for o in self.observables},
            "claims": [c.to_json() for c in self.claims],
            "where_agreement_breaks": [b.to_json() if isinstance(b, Break) else _json(b)
                                       for b in self.where_agreement_breaks],
            "details": _json(self.details),
        }

    def table(self) -> str:
        lines = [f"{self.paper}: {self.regime}", "", f"  {'observable':38s} {'rel_l2':>10s} {'tol':>8s}  verdict"]
        for o in self.observables:
            tol = "-" if o.tolerance is None else f"{o.tolerance:.3g}"
            verdict = {True: "pass", False: "FAIL", None: "diagnostic"}[o.passed]
            lines.append(f"  {o.name:38s} {o.rel_l2:10.4g} {tol:>8s}  {verdict}")
        if self.claims:
            lines += [""] + _claim_lines(self.claims)
        for row in self.where_agreement_breaks:
            lines += _break_lines(row.to_json() if isinstance(row, Break) else row)
        lines.append(f"agreement_passed (observables only): {self.agreement_passed}")
        from .claims.report import wrap_line

        return "\n".join(w for line in lines for w in wrap_line(line))  # at most 120 characters a line


def _break_lines(row: Mapping[str, Any]) -> list[str]:
    """One row of *where agreement breaks* as lines of at most 120 characters: its factor, then
    one ``key: a=1, b=2`` line per field (mappings spelled out, not printed as dicts)."""
    from .claims.report import wrap_line

    row = dict(row)
    lines = [f"  agreement breaks: {row.pop('factor', '')}"]
    for k, v in row.items():
        if v is None or v == "" or v == {}:
            continue
        text = ", ".join(f"{kk}={_short(vv)}" for kk, vv in v.items()) if isinstance(v, Mapping) else _short(v)
        lines += wrap_line(f"    {k.replace('_', ' ')}: {text}")
    return lines


def _claim_lines(claims: list[Any]) -> list[str]:
    """The claims table (figures.claims.report); an old single-run ``Claim`` gets one line."""
    from .claims.report import claims_table

    decided = [c for c in claims if not isinstance(c, Claim)]
    lines = claims_table(decided).splitlines() if decided else []
    old = [c for c in claims if isinstance(c, Claim)]
    if old:
        lines.append("claims decided on one run (no seeds, interval or regime map yet; evidence in --json)")
        from .claims.report import wrap_line

        lines += [w for c in old for w in wrap_line(f"  {c.name:32s} {'yes' if c.holds else 'NO':13s} "
                                                    f"{' '.join(c.statement.split())}")]
    return lines


def _short(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return f"{float(v):.4g}"
    if isinstance(v, Mapping):
        return "(" + ", ".join(f"{k}={_short(x)}" for k, x in v.items()) + ")"
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(_short(x) for x in list(v)[:6]) + (", ..." if len(v) > 6 else "") + "]"
    return str(v)
