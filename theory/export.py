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
  A system's ``noise`` (:mod:`theory.noise`) travels as ``"noise"``: per-sample loss, samples,
  distribution (a Monte-Carlo sampler by its ``"module:function"`` reference), map, per-sample
  flow ``g``, ``E[g]``, ``Cov[g]``, method and exactness (``null`` for a system without noise).
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
           "expr_to_str", "noise_to_json", "noise_from_json"]

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
    if getattr(system, "noise", None) is not None:
        exprs += system.noise.expressions() + [system.noise.batch_symbol]
    return exprs


def _symbol_table(system: ReducedSystem) -> dict[str, dict[str, bool]]:
    symbols = list(system.state) + list(system.parameters) + [s for s, _ in system.definitions] + [TIME]
    if getattr(system, "noise", None) is not None:
        symbols += list(system.noise.samples) + [system.noise.batch_symbol]
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
        "noise": None if getattr(system, "noise", None) is None else noise_to_json(system.noise),
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
        noise=None if doc.get("noise") is None else noise_from_json(doc["noise"], syms, doc["state"]),
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
            table(system.observables), table(system.invariants), table(system.closed_forms),
            _noise_signature(getattr(system, "noise", None)))


# ------------------------------------------------------------------------------------------------
# JSON of the noise (theory/noise.py)
# ------------------------------------------------------------------------------------------------
def _matrix_to_json(M):
    return None if M is None else [[expr_to_str(e) for e in row] for row in M.tolist()]


def _distribution_to_json(dist) -> dict[str, Any]:
    from . import noise as N

    if isinstance(dist, N.Finite):
        return {"kind": "finite", "outcomes": [{str(k): expr_to_str(v) for k, v in o.items()} for o in dist.outcomes],
                "probabilities": [expr_to_str(p) for p in dist.probabilities]}
    if isinstance(dist, N.Moments):
        return {"kind": "moments", "variables": [str(v) for v in dist.variables],
                "dummies": [str(t) for t in dist.dummies], "mgf": expr_to_str(dist.mgf),
                "description": dist.description}
    if isinstance(dist, N.Independent):
        return {"kind": "independent", "parts": [_distribution_to_json(p) for p in dist.parts]}
    if isinstance(dist, N.Mixture):
        return {"kind": "mixture", "weights": [expr_to_str(w) for w in dist.weights],
                "components": [_distribution_to_json(c) for c in dist.components]}
    if isinstance(dist, N.MonteCarlo):
        ref = dist.ref or _callable_ref(dist.sampler)
        if not ref:
            raise ValueError("noise: a MonteCarlo sampler must be a module-level function or carry ref='module:function' "
                             "(the JSON stores the reference; derived systems are cached as JSON)")
        return {"kind": "monte_carlo", "variables": [str(v) for v in dist.variables], "sampler": ref,
                "description": dist.description}
    raise TypeError(f"cannot export a distribution of type {type(dist).__name__}")


def _callable_ref(fn) -> str:
    """``"module:qualname"`` of an importable function, else ``""`` (the sampler cannot be reloaded)."""
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    return f"{module}:{name}" if module and name and "<" not in name else ""


def noise_to_json(noise) -> dict[str, Any]:
    """The ``"noise"`` entry of :func:`to_json` (every expression as a parseable string)."""
    b = noise.batch_symbol
    return {
        "method": noise.method, "exact": bool(noise.exact), "description": noise.description,
        "per_sample_loss": expr_to_str(noise.per_sample_loss),
        "state": [str(s) for s in noise.state], "samples": [str(s) for s in noise.samples],
        "batch_symbol": str(b),
        "distribution": _distribution_to_json(noise.distribution),
        "preconditioner": _matrix_to_json(noise.preconditioner),
        "gradient": [expr_to_str(e) for e in noise.gradient],
        "mean": None if noise.mean is None else [expr_to_str(e) for e in noise.mean],
        "covariance": _matrix_to_json(noise.covariance),
    }


def _distribution_from_json(doc, parse, syms):
    from . import noise as N

    kind = doc["kind"]
    if kind == "finite":
        return N.Finite(tuple({syms[k]: parse(v) for k, v in o.items()} for o in doc["outcomes"]),
                        tuple(parse(p) for p in doc["probabilities"]))
    if kind == "moments":
        return N.Moments(tuple(syms[v] for v in doc["variables"]), parse(doc["mgf"]),
                         tuple(syms[t] for t in doc["dummies"]), doc.get("description", ""))
    if kind == "independent":
        return N.Independent(tuple(_distribution_from_json(p, parse, syms) for p in doc["parts"]))
    if kind == "mixture":
        return N.Mixture(tuple(parse(w) for w in doc["weights"]),
                         tuple(_distribution_from_json(c, parse, syms) for c in doc["components"]))
    if kind == "monte_carlo":
        if not doc.get("sampler"):
            raise ValueError("noise: a Monte-Carlo distribution without an importable sampler cannot be loaded")
        return N.MonteCarlo(tuple(syms[v] for v in doc["variables"]), None, doc["sampler"], doc.get("description", ""))
    raise ValueError(f"noise: unknown distribution kind {kind!r}")


def noise_from_json(doc: Mapping[str, Any], syms: Mapping[str, sp.Symbol], state: Sequence[str]):
    """Rebuild a :class:`theory.noise.Noise` from :func:`noise_to_json` output (``syms``: the
    document's symbol table)."""
    from .noise import Noise

    syms = dict(syms)
    for n in (*doc["samples"], doc["batch_symbol"]):
        syms.setdefault(n, sp.Symbol(n))

    def parse(s: str) -> sp.Expr:
        return sp.parse_expr(s, local_dict=syms)

    def matrix(rows):
        return None if rows is None else sp.Matrix([[parse(e) for e in row] for row in rows])

    return Noise(
        per_sample_loss=parse(doc["per_sample_loss"]), state=tuple(syms[n] for n in doc.get("state", state)),
        samples=tuple(syms[n] for n in doc["samples"]),
        distribution=_distribution_from_json(doc["distribution"], parse, syms),
        preconditioner=matrix(doc["preconditioner"]), gradient=tuple(parse(e) for e in doc["gradient"]),
        mean=None if doc.get("mean") is None else tuple(parse(e) for e in doc["mean"]),
        covariance=matrix(doc.get("covariance")), exact=bool(doc["exact"]), method=doc["method"],
        batch_symbol=syms[doc["batch_symbol"]], description=doc.get("description", ""),
    )


def _noise_signature(noise) -> tuple | None:
    if noise is None:
        return None
    return (noise.method, bool(noise.exact), noise.state, noise.samples, noise.batch_symbol,
            tuple(_exact(e) for e in noise.expressions()), json.dumps(_distribution_to_json(noise.distribution)))


def systems_to_json(paper: str, systems: Sequence[ReducedSystem]) -> str:
    """The ``tdyn derive PAPER --format json`` document."""
    return json.dumps({"paper": paper, "systems": [s.to_json() for s in systems]}, indent=2)
