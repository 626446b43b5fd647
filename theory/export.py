"""Exporters of a :class:`~theory.core.ReducedSystem`: LaTeX, numpy/JAX source, JSON (read back by :mod:`theory.load`).

* :func:`to_latex` — an ``align`` environment: the paper's named quantities as definitions
  (``\\langle a,q\\rangle &:= ...``), then one ``\\dot{x} &= ...`` row per state (and the noise
  covariance when the system has one), parameters kept symbolic, no line over
  :data:`LATEX_WIDTH` characters; :func:`latex_document` wraps blocks in a compilable document.
  Every row renders with matplotlib mathtext; :func:`latex` is the same printer for one expression
  (figure labels use it, so figures and equations share their symbols).
* :func:`to_source` — self-contained numpy or JAX source of ``rhs(t, y, p)`` (and
  ``observables(y, p)``); the JAX one is jit-able.
* :func:`to_json` (read back by :func:`theory.load.load_system`) — every expression is printed so that plain
  ``sympy.parse_expr(expr, local_dict={n: Symbol(n) for n in state + parameters})`` parses it
  (names are identifiers, never keywords; floats printed with ``repr`` so float64 values round-trip);
  the symbols' assumptions are stored too, so :func:`theory.load.load_system` rebuilds an *equivalent* system.
  A system's ``noise`` (:mod:`theory.noise`) travels as ``"noise"``: per-sample loss, samples,
  distribution (a Monte-Carlo sampler by its ``"module:function"`` reference), map, per-sample
  flow ``g``, ``E[g]``, ``Cov[g]``, method and exactness (``null`` for a system without noise).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sympy as sp
from sympy.printing.conventions import split_super_sub
from sympy.printing.latex import LatexPrinter as _SympyLatexPrinter
from sympy.printing.str import StrPrinter

from .symbols import TIME

if TYPE_CHECKING:
    from .core import ReducedSystem

__all__ = ["to_latex", "latex", "latex_dot", "latex_document", "LatexPrinter", "LATEX_WIDTH", "latex_listing",
           "tex_prose", "tex_text", "to_source", "to_json", "systems_to_json", "system_signature",
           "expr_to_str", "noise_to_json", "noise_from_json"]

JSON_FORMAT = "tdyn-reduced-system/1"


# ------------------------------------------------------------------------------------------------
# LaTeX
# ------------------------------------------------------------------------------------------------
#: the longest line :func:`to_latex` prints (characters, ``\\`` and the alignment marks included)
LATEX_WIDTH = 120

NONUMBER = r" \nonumber"

#: symbol base names that stand for a Greek letter Python would not accept as a name
_GREEK_ALIASES = {"lam": "lambda"}


class LatexPrinter(_SympyLatexPrinter):
    """sympy's LaTeX printer with readable term order (a sum opens with a positive term when it has
    one: ``T - Q``, not ``- Q + T``; otherwise sympy's order) and ``lam`` printed as ``\\lambda``.
    Used for the exported equations and, through :func:`latex`, for figure labels (same symbols)."""

    def _as_ordered_terms(self, expr, order=None):
        terms = list(super()._as_ordered_terms(expr, order=order))
        if terms and terms[0].could_extract_minus_sign():
            k = next((i for i, t in enumerate(terms) if not t.could_extract_minus_sign()), None)
            if k is not None:
                terms.insert(0, terms.pop(k))
        return terms

    def _print_Symbol(self, expr, style="plain"):
        base, sups, subs = split_super_sub(expr.name)
        if base in _GREEK_ALIASES:
            name = "_".join([_GREEK_ALIASES[base], *subs]) + "".join("^" + s for s in sups)
            return super()._print_Symbol(sp.Symbol(name), style=style)
        return super()._print_Symbol(expr, style=style)


def latex(expr) -> str:
    """``expr`` (a sympy expression or symbol) in LaTeX, as :func:`to_latex` prints it; renders in
    matplotlib's mathtext (``"$" + latex(e) + "$"``)."""
    return LatexPrinter().doprint(sp.sympify(expr))


def latex_dot(symbol: sp.Symbol) -> str:
    """The time derivative of a state symbol: the dot over the base, not over its subscript
    (``\\dot{\\xi}_{1}``, not ``\\dot{\\xi_{1}}``)."""
    full = latex(symbol)
    base_name = split_super_sub(symbol.name)[0]
    base = latex(sp.Symbol(base_name))
    if base_name and full.startswith(base):
        return rf"\dot{{{base}}}{full[len(base):]}"
    return rf"\dot{{{full}}}"


class _Lines:
    """Breaks ``lhs &= expr`` lines to at most ``width`` characters: a long sum continues on
    ``&\\quad + ...`` lines; a term or factor too long for a line becomes a named intermediate
    ``u_{k} := ...`` (printed before its first use; the same subexpression keeps its name). Only
    the printing changes: the system is not touched, and substituting the intermediates back gives
    the printed expressions exactly."""

    CONT = r"&\quad "

    def __init__(self, system_symbols, width: int = LATEX_WIDTH, printer=None):
        self.p = printer if printer is not None else LatexPrinter()
        self.width = width
        taken = {split_super_sub(str(s))[0] for s in system_symbols}
        self.base = next(b for b in ("u", "w", "q", "varpi", "varkappa", "U", "W") if b not in taken)
        self.names: dict[sp.Expr, sp.Symbol] = {}
        self.pending: list[str] = []  # lines of intermediates named since the last :meth:`lines`

    # -- naming -----------------------------------------------------------------------------------
    def _name(self, expr) -> sp.Symbol:
        if expr not in self.names:
            sym = sp.Symbol(f"{self.base}_{len(self.names) + 1}")
            self.names[expr] = sym
            self.pending += self.equation(sym, ":=", expr)
        return self.names[expr]

    def _fits(self, head: str, tex: str) -> bool:
        """Whether ``head + tex`` fits a row, with its `` \\`` and (continuation rows) ``\nonumber``."""
        tail = len(r" \\") + (len(NONUMBER) if head.startswith(self.CONT) else 0)
        return len(head) + len(tex) + tail <= self.width

    def _shrink(self, head: str, expr):
        """``expr`` with its longest operands named until it fits after ``head`` (a sum is left for
        :meth:`equation` to break across lines)."""
        for _ in range(1000):  # each pass names one operand: the expression shrinks
            if isinstance(expr, sp.Add) or self._fits(head, self.p.doprint(expr)):
                break
            parts = [a.base if isinstance(a, sp.Pow) and a.exp.is_Number and not a.base.is_Atom else a
                     for a in expr.args]
            parts = [a for a in parts if not a.is_Atom and a not in self.names.values()]
            if not parts:
                break
            expr = expr.xreplace({(big := max(parts, key=lambda a: len(self.p.doprint(a)))): self._name(big)})
        return expr

    def lines(self, lhs, op: str, expr) -> list[str]:
        """The rows of ``lhs op expr``, preceded by the intermediates they name."""
        rows = self.equation(lhs, op, expr)
        named, self.pending = self.pending, []
        return named + rows

    def equation(self, lhs, op: str, expr) -> list[str]:
        """The lines of ``lhs op expr`` (``op`` is ``=`` or ``:=``); ``lhs`` a symbol or LaTeX."""
        lhs_tex = lhs if isinstance(lhs, str) else self.p.doprint(lhs)
        head = f"{lhs_tex} &{op} "
        expr = sp.sympify(expr)
        if self._fits(head, self.p.doprint(expr)):
            return [head + self.p.doprint(expr)]
        short = sp.factor_terms(expr)  # a common factor out of a long sum: fewer, shorter terms
        expr = short if len(self.p.doprint(short)) < len(self.p.doprint(expr)) else expr
        if not isinstance(expr, sp.Add):
            expr = self._shrink(head, expr)
            return [head + self.p.doprint(expr)]
        lines, current, empty = [], head, True
        for i, term in enumerate(self.p._as_ordered_terms(expr)):
            sign = "" if i == 0 else ("- " if term.could_extract_minus_sign() else "+ ")
            body = -term if sign == "- " else term
            if not self._fits(self.CONT + sign, self.p.doprint(body)):
                body = self._shrink(self.CONT + sign, body)
                if not self._fits(self.CONT + sign, self.p.doprint(body)):
                    body = self._name(body)
            piece = sign + self.p.doprint(body)
            if not empty and not self._fits(current + " ", piece):
                lines.append(current)
                current, empty = self.CONT, True
            current += ("" if empty else " ") + piece
            empty = False
        return lines + [current]


def _block(lines: list[str]) -> list[str]:
    """``lines`` as rows of an ``align``: continuation rows unnumbered."""
    rows = [ln + (NONUMBER if ln.startswith(_Lines.CONT) else "") for ln in lines]
    return [r + " \\\\" for r in rows[:-1]] + rows[-1:]


def to_latex(system: ReducedSystem, expanded: bool = False, *, width: int = LATEX_WIDTH) -> str:
    """An ``align`` environment (pastes into a document with ``amsmath``): the paper's named
    quantities as definitions (``\\langle a,q\\rangle &:= ...``), then ``\\dot{x} &= ...`` per
    state, then, when the system carries a minibatch noise model with a covariance, the diffusion
    ``\\Sigma(\\theta) = \\frac{1}{B}\\,\\mathrm{Cov}_x[g]`` entry by entry (a finite distribution whose
    covariance is left implicit: ``\\Sigma`` as the sum over its outcomes, the per-sample flow ``g`` row
    by row and the outcomes; a closed-form law whose covariance is left implicit: ``\\Sigma`` from the
    moments, with the law's moment generating functions); parameters stay symbolic.
    No line is longer than ``width`` characters: long right-hand sides continue on ``&\\quad``
    lines and too-long terms become printing intermediates ``u_{k} := ...`` (listed in a comment
    line before the environment; the system is unchanged). ``expanded=True`` substitutes the
    definitions (per-component form). Every row renders in matplotlib's mathtext once the
    alignment marks are removed."""
    from . import noise as N

    symbols = {*system.state, *system.parameters, *(s for s, _ in system.definitions)}
    rhs = system.expanded_rhs if expanded else system.rhs
    exprs = [*rhs, *([] if expanded else (e for _, e in system.definitions))]
    symbols |= set().union(*(sp.sympify(e).free_symbols for e in exprs)) if exprs else set()
    noise = getattr(system, "noise", None)
    cov = getattr(noise, "covariance", None) if noise is not None else None
    if cov is not None:
        symbols |= cov.free_symbols
    elif noise is not None and getattr(noise, "implicit_covariance", False):
        symbols |= set(noise.samples)
        if not isinstance(noise.distribution, N.Finite):
            symbols |= set().union(*(e.free_symbols for e in N._distribution_expressions(noise.distribution)))
    out = _Lines(symbols, width)
    body: list[str] = []
    if not expanded:
        for s, e in system.definitions:
            body += out.lines(s, ":=", e)
    for s, f in zip(system.state, rhs):
        body += out.lines(latex_dot(s), "=", f)
    if cov is not None:
        batch = getattr(noise, "batch_symbol", None)
        b = latex(batch) if batch is not None else "B"
        body += [rf"\Sigma(\theta) &= \frac{{1}}{{{b}}}\,\mathrm{{Cov}}_x[g]"]
        n = len(system.state)
        size = sum(len(str(cov[i, j])) for i in range(n) for j in range(i, n))
        if size > COVARIANCE_PRINT_MAX:  # e.g. topic's full-space system: the entries are in the JSON and source
            n = 0
            body += [out.CONT + rf"\text{{exact (closed form): {sum(1 for e in cov if e != 0)} non-zero entries, "
                                r"in the JSON and Python exports}"]
        for i in range(n):
            for j in range(i, n):
                if cov[i, j] != 0:
                    lhs = rf"\mathrm{{Cov}}_x[g]_{{{latex(system.state[i])}\,{latex(system.state[j])}}}"
                    body += out.lines(lhs, "=", cov[i, j])
    elif noise is not None and getattr(noise, "implicit_covariance", False):
        finite = isinstance(noise.distribution, N.Finite)
        body += (_implicit_covariance_rows if finite else _moment_covariance_rows)(system, noise, out)
    elif noise is not None:
        body += _sampled_covariance_rows(noise, out)
    rows = _block(body)
    note = []
    if out.names:
        first, *_, last = [latex(s) for s in out.names.values()] * 2
        names = {1: first, 2: f"{first}, {last}"}.get(len(out.names), f"{first} to {last}")
        note = [f"% {names}: intermediates introduced for printing (not quantities of the system)"]
    return "\n".join([*note, r"\begin{align}", *rows, r"\end{align}"])


#: the largest covariance (characters of its upper triangle) printed entry by entry; a larger one is in the JSON
COVARIANCE_PRINT_MAX = 20_000

#: the longest per-sample loss (LaTeX characters) a Monte-Carlo noise prints; a longer one is in the JSON
SAMPLED_LOSS_MAX = 4000


def _sampled_covariance_rows(noise, out: _Lines) -> list[str]:
    """The rows of a noise whose covariance has no closed form here (a Monte-Carlo law): ``Σ`` as the
    covariance over the law of the per-sample flow of the per-sample loss ``ℓ`` (printed when
    shorter than :data:`SAMPLED_LOSS_MAX`; the JSON export always holds it and ``g``)."""
    b = latex(noise.batch_symbol)
    samples = ",".join(latex(x) for x in noise.samples)
    rows = [rf"\Sigma(\theta) &= \frac{{1}}{{{b}}}\,\mathrm{{Cov}}_x\left[g(\theta;\, x)\right]",
            out.CONT + r"g(\theta;\, x) = -P\, \nabla_{\theta}\, \ell(\theta;\, x)",
            out.CONT + r"\text{estimated per step by Monte Carlo over the law of } x"]
    head = out.CONT + r"x = (" + samples + ")"
    rows += [head] if out._fits(out.CONT, head[len(out.CONT):]) else []
    if len(latex(noise.per_sample_loss)) <= SAMPLED_LOSS_MAX:
        rows += out.lines(r"\ell(\theta;\, x)", "=", noise.per_sample_loss)
    return rows


def _moment_covariance_rows(system: ReducedSystem, noise, out: _Lines) -> list[str]:
    """The rows of an exact noise whose covariance is left implicit in a closed-form law's moments:
    ``Σ`` as ``(E[g gᵀ] - ḡ ḡᵀ)/B``, ``g`` the per-sample flow (polynomial in the samples), the
    samples and, for each :class:`~theory.noise.Moments` part of the law, its moment generating
    function (each printed when it fits; the JSON export holds them all)."""
    from . import noise as N

    b = latex(noise.batch_symbol)
    rows = [rf"\Sigma(\theta) &= \frac{{1}}{{{b}}} \left(\mathbb{{E}}_x\left[g\, g^{{\top}}\right] - "
            r"\bar{g}\, \bar{g}^{\top}\right)",
            out.CONT + r"\bar{g} = \mathbb{E}_x[g],\ g(\theta;\, x) = -P\, \nabla_{\theta}\, \ell(\theta;\, x)",
            out.CONT + r"\text{exact: } g \text{ is polynomial in } x\text{; its moments: derivatives of}",
            out.CONT + r"M(t) = \mathbb{E}\, e^{t \cdot x} \text{ (the moment generating function) at } t = 0"]
    head = out.CONT + r"x = (" + ",".join(latex(x) for x in noise.samples) + ")"
    rows += [head] if out._fits(out.CONT, head[len(out.CONT):]) else []
    dist = noise.distribution
    parts = dist.parts if isinstance(dist, N.Independent) else (dist,)
    for part in parts:
        mgf = part.mgf.xreplace({t: sp.Symbol(f"t_{{{latex(x)}}}") for t, x in zip(part.dummies, part.variables)}
                                ) if isinstance(part, N.Moments) else None
        if mgf is not None and len(latex(mgf)) <= SAMPLED_LOSS_MAX:
            xs = ",".join(latex(x) for x in part.variables)
            rows += out.lines(rf"M_{{{xs}}}(t)", "=", mgf)
    if len(latex(noise.per_sample_loss)) <= SAMPLED_LOSS_MAX:
        rows += out.lines(r"\ell(\theta;\, x)", "=", noise.per_sample_loss)
    return rows


def _implicit_covariance_rows(system: ReducedSystem, noise, out: _Lines) -> list[str]:
    """The rows of a :class:`~theory.noise.Finite` noise whose covariance is left implicit
    (``derive_noise(..., covariance=False)``): ``Σ`` as the sum over the outcomes, the per-sample
    flow ``g`` (one row per state, in the sample symbols) and each outcome's probability and
    sample values (packed into rows of at most the width)."""
    b = latex(noise.batch_symbol)
    dev = r"\left(g^{(k)} - \bar{g}\right)"
    rows = [rf"\Sigma(\theta) &= \frac{{1}}{{{b}}} \sum_{{k}} p_{{k}} {dev} {dev}^{{\top}}",
            out.CONT + r"g^{(k)} = g(\theta;\, x^{(k)}),\ \bar{g} = \sum_{k} p_{k}\, g^{(k)}",
            out.CONT + r"g(\theta;\, x) = -P\, \nabla_{\theta}\, \ell(\theta;\, x)"]
    for s, e in zip(system.state, noise.gradient):
        rows += out.lines(rf"g_{{{latex(s)}}}", "=", e)
    dist = noise.distribution
    for k, (p, outcome) in enumerate(zip(dist.probabilities, dist.outcomes), 1):
        items = [rf"p_{{{k}}} = {latex(p)}"] + [f"{latex(x)} = {latex(v)}" for x, v in outcome.items()]
        head, line = rf"x^{{({k})}} &: ", ""
        for item in items:
            piece = item if not line else r",\ " + item
            if line and not out._fits(head, line + piece):
                rows.append(head + line)
                head, line, piece = out.CONT, "", item
            line += piece
        rows.append(head + line)
    return rows


#: LaTeX for the characters plain text may hold that are special (or, without T1 fonts, garbled) in text mode
_TEX_TEXT = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
             "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "|": r"\textbar{}",
             "<": r"\textless{}", ">": r"\textgreater{}"}

#: ``$...$`` math in a description (a ``\$`` is a literal dollar)
_MATH = re.compile(r"(?<!\\)\$(.+?)(?<!\\)\$")


def tex_text(text: str) -> str:
    """Plain text for a LaTeX document: every character special in text mode escaped (``|``, ``<``,
    ``>`` as ``\\textbar{}`` etc., right in any font encoding)."""
    return "".join(_TEX_TEXT.get(ch, ch) for ch in text)


def tex_prose(text: str) -> str:
    """A description for a LaTeX document: ``$...$`` spans kept as math, the rest escaped
    (:func:`tex_text`)."""
    out, last = [], 0
    for m in _MATH.finditer(text):
        out += [tex_text(text[last:m.start()]), m.group(0)]
        last = m.end()
    return "".join(out + [tex_text(text[last:])])


def _wrap(text: str, width: int = LATEX_WIDTH) -> list[str]:
    """``text`` in lines of at most ``width`` characters (words kept whole; a LaTeX paragraph)."""
    import textwrap

    return textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False) or [""]


def latex_listing(paper: str, systems: Sequence[ReducedSystem], expanded: bool = False) -> str:
    """``tdyn derive PAPER --format latex``: per system a comment naming it and its specification
    (wrapped to :data:`LATEX_WIDTH`), then :func:`to_latex`."""
    parts = []
    for s in systems:
        head = _wrap(f"{paper}/{s.name} — {s.spec}", LATEX_WIDTH - 2)
        parts.append("".join(f"% {ln}\n" for ln in head) + s.to_latex(expanded=expanded) + "\n\n")
    return "".join(parts)


def latex_document(paper: str, blocks: Sequence[tuple[ReducedSystem, str]]) -> str:
    """A compilable LaTeX document (``pdflatex``) holding each ``(system, to_latex(system))`` under
    a heading with the system's name, specification and description (its ``$...$`` math typeset,
    the prose escaped; T1 fonts, so no character of the prose is garbled). No line over
    :data:`LATEX_WIDTH` characters."""
    parts = [r"\documentclass[10pt]{article}", r"\usepackage[T1]{fontenc}",
             r"\IfFileExists{lmodern.sty}{\usepackage{lmodern}}{}",  # scalable T1 fonts where installed
             r"\usepackage[a4paper,landscape,margin=1.5cm]{geometry}", r"\usepackage{amsmath,amssymb}",
             r"\allowdisplaybreaks", r"\begin{document}", rf"\section*{{Reduced systems of {tex_text(paper)} (tdyn)}}"]
    for system, block in blocks:
        parts += [rf"\subsection*{{{tex_text(system.name)}}}"]
        parts += _wrap(" ".join(x for x in (tex_text(system.spec) + ("." if system.spec else ""),
                                            tex_prose(system.description)) if x))
        noise = getattr(system, "noise", None)
        if noise is not None and noise.description:
            parts += ["", *_wrap(r"\emph{Minibatch noise:} " + tex_prose(noise.description))]
        parts += [block]
    return "\n".join(parts + [r"\end{document}", ""])


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
    noise = getattr(system, "noise", None)
    if noise is not None:
        body += _noise_source(noise, printer, kind, suffix, unpack)
    if system.observables:
        body += [f"def observables{suffix}(y, p):", '    """Named observables as a dict."""', *unpack(),
                 "    return {", *[f"        {n!r}: {printer.doprint(e)}," for n, e in system.observables.items()],
                 "    }", ""]
    return "\n".join(head + body)


#: the longest per-sample flow (characters of its common-subexpression form) the source export writes
SOURCE_FLOW_MAX = 200_000


def _noise_source(noise, printer, kind: str, suffix: str, unpack) -> list[str]:
    """The minibatch noise as source: ``SAMPLES``, ``NOISE`` (method, exactness, batch symbol, the
    law), ``per_sample_flow(y, p, x)`` (``g``, x in ``SAMPLES`` order) and, where it is exact,
    ``covariance(y, p)`` (``Cov_x[g]`` per sample, ``d x d``; ``Σ = covariance / B``): the closed-form
    matrix, or the sum over a finite law's outcomes (a closed-form law's implicit covariance is named in
    a comment). A Monte-Carlo law names its sampler."""
    from . import noise as N

    xp = "numpy" if kind == "numpy" else "jax.numpy"
    dist = noise.distribution
    law = (f"sampler {dist.ref or _callable_ref(dist.sampler)}" if isinstance(dist, N.MonteCarlo)
           else f"{dist.kind} law (closed form)" + (f", sampler {dist.ref}" if getattr(dist, "ref", "") else ""))
    meta = {"method": noise.method, "exact": bool(noise.exact), "batch_symbol": str(noise.batch_symbol), "law": law}
    out = [f"SAMPLES{suffix} = {[str(x) for x in noise.samples]!r}",
           f"NOISE{suffix} = {meta!r}  # Sigma = Cov_x[g] / B", ""]
    subs, reduced = sp.cse(list(noise.gradient), optimizations="basic")
    code = [f"    {printer.doprint(s)} = {printer.doprint(e)}" for s, e in subs]
    rows = [f"        {printer.doprint(e)}," for e in reduced]
    if sum(map(len, code + rows)) > SOURCE_FLOW_MAX:
        return out + [f"# per_sample_flow{suffix}: too long for the source export; the JSON export holds it", ""]
    out += [f"def per_sample_flow{suffix}(y, p, x):",
            f'    """g(theta; x) = -P grad l(theta; x), shape (d,); x in SAMPLES{suffix} order."""',
            *unpack(), *[f"    {printer.doprint(x)} = x[{i}]" for i, x in enumerate(noise.samples)], *code,
            f"    return {xp}.stack([{xp}.asarray(v, dtype=float) for v in [", *rows, "    ]])", ""]
    d = len(noise.state)
    if noise.covariance is not None:
        entries = [noise.covariance[i, j] for i in range(d) for j in range(i, d)]
        subs, reduced = sp.cse(entries, optimizations=None)  # "basic" costs minutes on a 30 x 30 covariance
        out += [f"def covariance{suffix}(y, p):",
                f'    """Cov_x[g] per sample ({noise.method}, exact: {bool(noise.exact)}), shape (d, d)."""',
                *unpack(), *[f"    {printer.doprint(s)} = {printer.doprint(e)}" for s, e in subs],
                "    upper = [", *[f"        {printer.doprint(e)}," for e in reduced], "    ]",
                f"    C = {xp}.zeros(({d}, {d}))", f"    i, j = {xp}.triu_indices({d})",
                *(["    C[i, j] = upper", "    C[j, i] = upper"] if kind == "numpy" else
                  ["    C = C.at[i, j].set(jax.numpy.asarray(upper, dtype=float))",
                   "    C = C.at[j, i].set(jax.numpy.asarray(upper, dtype=float))"]),
                "    return C", ""]
    elif isinstance(dist, N.Finite):
        outcomes = ["[" + ", ".join(printer.doprint(o[x]) for x in noise.samples) + "]" for o in dist.outcomes]
        out += [f"def covariance{suffix}(y, p):",
                f'    """Cov_x[g] per sample, exact: the sum over the law\'s {len(outcomes)} outcomes, shape (d, d)."""',
                *unpack(), "    probs = [" + ", ".join(printer.doprint(q) for q in dist.probabilities) + "]",
                "    outcomes = [", *[f"        {o}," for o in outcomes], "    ]",
                f"    gs = {xp}.stack([per_sample_flow{suffix}(y, p, x) for x in outcomes])",
                f"    w = {xp}.asarray(probs, dtype=float)", "    dev = gs - w @ gs",
                "    return (dev * w[:, None]).T @ dev", ""]
    elif noise.implicit_covariance:
        out += [f"# covariance{suffix}: exact but not written out (E[g g^T] - E g E g^T from the law's closed-form",
                "# moments; theory.noise.covariance_at evaluates it at a point)", ""]
    return out


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
                "description": dist.description, **({"sampler": dist.ref} if dist.ref else {})}
    if isinstance(dist, N.Independent):
        return {"kind": "independent", "parts": [_distribution_to_json(p) for p in dist.parts],
                **({"sampler": dist.ref} if dist.ref else {})}
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
                         tuple(syms[t] for t in doc["dummies"]), doc.get("description", ""), doc.get("sampler", ""))
    if kind == "independent":
        return N.Independent(tuple(_distribution_from_json(p, parse, syms) for p in doc["parts"]),
                             doc.get("sampler", ""))
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


def _as_printed(e) -> sp.Expr:
    """``e`` as JSON stores and reloads it (printed, then parsed with its own symbols): sympy's
    evaluation on parsing regroups unsimplified expressions (``x/(2*(a + b))`` comes back as
    ``x/(2*a + 2*b)``), so a signature compares the reloaded form of both sides."""
    e = sp.sympify(e)
    return sp.parse_expr(expr_to_str(e), local_dict={str(s): s for s in e.free_symbols})


def _noise_signature(noise) -> tuple | None:
    if noise is None:
        return None
    return (noise.method, bool(noise.exact), noise.state, noise.samples, noise.batch_symbol,
            tuple(_exact(_as_printed(e)) for e in noise.expressions()),
            json.dumps(_distribution_to_json(noise.distribution)))


def systems_to_json(paper: str, systems: Sequence[ReducedSystem]) -> str:
    """The ``tdyn derive PAPER --format json`` document."""
    return json.dumps({"paper": paper, "systems": [s.to_json() for s in systems]}, indent=2)
