"""Reading a system back: :func:`load_system` turns what :func:`theory.export.to_json` (``tdyn
derive P --format json``) wrote into an equivalent :class:`~theory.core.ReducedSystem`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sympy as sp

from .core import ReducedSystem
from .export import noise_from_json

__all__ = ["load_system"]


def load_system(source: str | os.PathLike | Mapping[str, Any], name: str | None = None) -> ReducedSystem:
    """Read a system written by :func:`to_json` back: ``source`` is a dict, a JSON string, or a
    path to a ``.json`` file holding one system (``tdyn derive P --format json --system NAME``) or a
    ``tdyn derive P --format json`` document of several; ``name`` picks one of several (required
    when the document holds more than one; ``ConfigError("system", ...)`` names the available
    ones)."""
    if isinstance(source, Mapping):
        doc = dict(source)
    else:
        text = str(source)
        doc = json.loads(text) if text.lstrip().startswith("{") else json.loads(Path(text).read_text())
    doc = _one_system(doc, name)
    syms = {n: sp.Symbol(n, **a) for n, a in doc.get("symbols", {}).items()}
    for n in (*doc["state"], *doc["parameters"]):
        syms.setdefault(n, sp.Symbol(n))

    def parse(s: str) -> sp.Expr:
        return sp.parse_expr(s, local_dict=syms)

    diffusion = doc.get("diffusion")
    return ReducedSystem(
        name=doc["name"], paper=doc.get("paper", ""),
        state=tuple(syms[n] for n in doc["state"]), parameters=tuple(syms[n] for n in doc["parameters"]),
        rhs=tuple(parse(doc["rhs"][n]) for n in doc["state"]),
        diffusion=None if diffusion is None else sp.Matrix([[parse(e) for e in row] for row in diffusion]),
        observables={n: parse(e) for n, e in doc.get("observables", {}).items()},
        invariants={n: parse(e) for n, e in doc.get("invariants", {}).items()},
        closed_forms={n: parse(e) for n, e in doc.get("closed_forms", {}).items()},
        spec=doc.get("spec", ""), description=doc.get("description", ""),
        definitions=tuple((syms[n], parse(e)) for n, e in doc.get("definitions", [])),
        noise=None if doc.get("noise") is None else noise_from_json(doc["noise"], syms, doc["state"]),
    )


def _one_system(doc: Mapping[str, Any], name: str | None) -> Mapping[str, Any]:
    """The system document called ``name`` (or the only one) of a one- or many-system document."""
    from .errors import ConfigError, did_you_mean

    systems = list(doc["systems"]) if "systems" in doc else [doc]
    names = [s.get("name") for s in systems]
    if name is None:
        if len(systems) == 1:
            return systems[0]
        raise ConfigError("system", f"the document holds {len(systems)} systems ({', '.join(names)}); "
                                    "pass name= one of them")
    if name not in names:
        raise ConfigError("system", f"no system {name!r} in the document{did_you_mean(name, names)}; "
                                    f"available: {', '.join(names)}")
    return systems[names.index(name)]
