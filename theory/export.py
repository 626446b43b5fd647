"""Exporters of a :class:`~theory.core.ReducedSystem`: LaTeX, numpy/JAX source, JSON and back.

* :func:`to_latex` — an ``aligned`` block: the paper's named quantities as definitions
  (``\\langle a,q\\rangle &:= ...``), then one ``\\dot{x} &= ...`` line per state, parameters kept
  symbolic. Every line renders with matplotlib mathtext.
* :func:`to_source` — self-contained numpy or JAX source of ``rhs(t, y, p)`` (and
  ``observables(y, p)``); the JAX one is jit-able.
* :func:`to_json` / :func:`load_system` — every expression is printed so that plain
  ``sympy.parse_expr(expr, local_dict={n: Symbol(n) for n in state + parameters})`` parses it
  (names are identifiers, never keywords; floats printed with ``repr`` so float64 values round-trip);
  the symbols' assumptions are stored too, so :func:`load_system` rebuilds an *equivalent* system.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import sympy as sp
from sympy.printing.str import StrPrinter

from .core import TIME, ReducedSystem

__all__ = ["to_latex", "to_source", "to_json", "load_system", "systems_to_json", "system_signature",
           "expr_to_str"]

JSON_FORMAT = "tdyn-reduced-system/1"


# ------------------------------------------------------------------------------------------------
# LaTeX
# ------------------------------------------------------------------------------------------------
def to_latex(system: ReducedSystem, expanded: bool = False) -> str:
    lines = []
    if not expanded:
        lines += [rf"{sp.latex(s)} &:= {sp.latex(e)}" for s, e in system.definitions]
    rhs = system.expanded_rhs if expanded else system.rhs
    lines += [rf"\dot{{{sp.latex(s)}}} &= {sp.latex(f)}" for s, f in zip(system.state, rhs)]
    return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"


# ------------------------------------------------------------------------------------------------
# Source code
# ------------------------------------------------------------------------------------------------
def _printer(kind: str):
    from sympy.printing.numpy import JaxPrinter, NumPyPrinter

    if kind == "numpy":
        return NumPyPrinter({"fully_qualified_modules": True, "allow_unknown_functions": False})

    class _Jax(JaxPrinter):
        # JaxPrinter prints erf as math.erf (not traceable): map special functions explicitly.
        def _print_erf(self, e):
            return f"jax.scipy.special.erf({self._print(e.args[0])})"

        def _print_erfinv(self, e):
            return f"jax.scipy.special.erfinv({self._print(e.args[0])})"

    return _Jax({"fully_qualified_modules": True, "allow_unknown_functions": False})


def to_source(system: ReducedSystem, kind: str = "numpy", suffix: str = "") -> str:
    """Source defining ``rhs{suffix}(t, y, p)`` (+ ``observables{suffix}(y, p)``), ``STATE{suffix}``
    and ``PARAMETERS{suffix}``; ``kind`` is ``"numpy"`` or ``"jax"``. Definitions become local
    assignments, so the code reads like the paper."""
    printer = _printer(kind)
    imports = ["import numpy", "import scipy.special"] if kind == "numpy" else [
        "import jax", "import jax.numpy", "import jax.scipy.special"]
    head = [f'"""Reduced system {system.paper}/{system.name} exported by tdyn ({system.spec}); '
            f'{"jit-able JAX" if kind == "jax" else "numpy"} source."""', *imports, "",
            f"STATE{suffix} = {list(system.state_names)!r}",
            f"PARAMETERS{suffix} = {list(system.parameter_names)!r}", ""]

    def unpack() -> list[str]:
        out = [f"    {printer.doprint(s)} = y[{i}]" for i, s in enumerate(system.state)]
        out += [f"    {printer.doprint(s)} = p[{i}]" for i, s in enumerate(system.parameters)]
        out += [f"    {printer.doprint(s)} = {printer.doprint(e)}  # definition" for s, e in system.definitions]
        return out

    body = [f"def rhs{suffix}(t, y, p):",
            f'    """dy/dt; y in STATE{suffix} order, p in PARAMETERS{suffix} order."""', *unpack()]
    subs, reduced = sp.cse(list(system.rhs), optimizations="basic")
    body += [f"    {printer.doprint(s)} = {printer.doprint(e)}" for s, e in subs]
    if kind == "numpy":
        body += ["    return numpy.array([", *[f"        {printer.doprint(e)}," for e in reduced],
                 "    ], dtype=float)", ""]
    else:
        body += ["    return jax.numpy.stack([",
                 *[f"        jax.numpy.broadcast_to(jax.numpy.asarray({printer.doprint(e)}, dtype=y.dtype), ()),"
                   for e in reduced], "    ])", ""]
    if system.observables:
        body += [f"def observables{suffix}(y, p):", '    """Named observables as a dict."""', *unpack(),
                 "    return {", *[f"        {n!r}: {printer.doprint(e)}," for n, e in system.observables.items()],
                 "    }", ""]
    return "\n".join(head + body)


# ------------------------------------------------------------------------------------------------
# JSON
# ------------------------------------------------------------------------------------------------
class _JsonPrinter(StrPrinter):
    """``sstr`` with float64 values printed by ``repr`` (round-trips exactly)."""

    def _print_Float(self, expr):
        if expr._prec <= 53:
            return repr(float(expr))
        return super()._print_Float(expr)


def expr_to_str(expr) -> str:
    return _JsonPrinter({"order": "none"}).doprint(sp.sympify(expr))


def _all_expressions(system: ReducedSystem) -> list[sp.Expr]:
    exprs = list(system.rhs) + [e for _, e in system.definitions]
    exprs += [sp.sympify(e) for table in (system.observables, system.invariants, system.closed_forms)
              for e in table.values()]
    if system.diffusion is not None:
        exprs += list(system.diffusion)
    return exprs


def _symbol_table(system: ReducedSystem) -> dict[str, dict[str, bool]]:
    symbols = list(system.state) + list(system.parameters) + [s for s, _ in system.definitions] + [TIME]
    for e in _all_expressions(system):
        symbols += sorted(e.free_symbols, key=str)
    table: dict[str, dict[str, bool]] = {}
    for s in symbols:
        orig = getattr(s, "_assumptions_orig", None)
        assumptions = {k: bool(v) for k, v in (orig if orig is not None else s.assumptions0).items() if v is not None}
        if str(s) in table and table[str(s)] != assumptions:
            raise ValueError(f"{system.name}: two symbols named {s} with different assumptions")
        table[str(s)] = assumptions
    return table


def to_json(system: ReducedSystem) -> dict[str, Any]:
    table = _symbol_table(system)
    for n in table:
        if not n.isidentifier():
            raise ValueError(f"{system.paper}/{system.name}: symbol {n!r} is not a Python identifier")
    return {
        "format": JSON_FORMAT,
        "name": system.name,
        "paper": system.paper,
        "spec": system.spec,
        "description": system.description,
        "state": list(system.state_names),
        "parameters": list(system.parameter_names),
        "symbols": table,
        "definitions": [[str(s), expr_to_str(e)] for s, e in system.definitions],
        "rhs": {str(s): expr_to_str(f) for s, f in zip(system.state, system.rhs)},
        "diffusion": None if system.diffusion is None else [[expr_to_str(e) for e in row]
                                                            for row in system.diffusion.tolist()],
        "observables": {n: expr_to_str(e) for n, e in system.observables.items()},
        "invariants": {n: expr_to_str(e) for n, e in system.invariants.items()},
        "closed_forms": {n: expr_to_str(e) for n, e in system.closed_forms.items()},
        "latex": system.latex_dict(),
    }


def load_system(source: str | os.PathLike | Mapping[str, Any]) -> ReducedSystem:
    """Read a system written by :func:`to_json` (a dict, a JSON string, or a path to a ``.json`` file
    holding one system or a ``tdyn derive --format json`` document with exactly one system)."""
    if isinstance(source, Mapping):
        doc = dict(source)
    else:
        text = str(source)
        doc = json.loads(text) if text.lstrip().startswith("{") else json.loads(Path(text).read_text())
    if "systems" in doc:
        if len(doc["systems"]) != 1:
            raise ValueError(f"document holds {len(doc['systems'])} systems; pass one of doc['systems']")
        doc = doc["systems"][0]
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
    )


def _exact(e) -> sp.Expr:
    e = sp.sympify(e)
    return e.xreplace({f: sp.Rational(float(f)) for f in e.atoms(sp.Float)})


def system_signature(system: ReducedSystem) -> tuple:
    """A hashable summary used by :meth:`ReducedSystem.equivalent`."""

    def table(t):
        return tuple((n, _exact(e)) for n, e in t.items())

    return (system.name, system.paper, system.state, system.parameters,
            tuple(_exact(e) for e in system.rhs), tuple((s, _exact(e)) for s, e in system.definitions),
            None if system.diffusion is None else tuple(_exact(e) for e in system.diffusion),
            table(system.observables), table(system.invariants), table(system.closed_forms))


def systems_to_json(paper: str, systems: Sequence[ReducedSystem]) -> str:
    """The ``tdyn derive PAPER --format json`` document."""
    return json.dumps({"paper": paper, "systems": [s.to_json() for s in systems]}, indent=2)
