"""Equations that paste: ``tdyn derive P --format latex`` is a complete ``align``
environment with rows of at most 120 characters for every paper, ``--standalone`` compiles with
pdflatex (where installed), long right-hand sides are broken through named intermediates without
losing or changing a term, ``\\dot`` sits on the base symbol, sums open with a positive term, and the
noise covariance is printed when a system carries one."""

from types import SimpleNamespace

import pytest
import sympy as sp
from click.testing import CliRunner

from figures.cli import main
from figures.papers import get
from helpers.latex import GARBLED, have_tex, pdf_text
from theory import ReducedSystem
from theory.export import LATEX_WIDTH, _Lines, latex, latex_document, to_latex

PAPER_NAMES = ("scb", "scan-snap", "topic", "joma")


def _systems(name):
    row = get(name)
    return row.slot("systems")(row.make_config())


def _long_sum_system(n=14) -> ReducedSystem:
    """``x' = sum_i a_i x^i y^(n-i) / (1 + y^2) - y``: a right-hand side far over one line."""
    x, y = sp.symbols("x y", real=True)
    a = sp.symbols(f"a_1:{n + 1}", positive=True)
    big = sum(ai * x**i * y ** (n - i) for i, ai in enumerate(a, 1))
    return ReducedSystem(name="long", paper="toy", state=(x, y), parameters=a,
                         rhs=(big / (1 + y**2) - y, sp.exp(big) * x - y))


@pytest.mark.parametrize("name", PAPER_NAMES)
def test_every_paper_prints_align_rows_of_at_most_120_characters(name):
    for s in _systems(name):
        text = to_latex(s)
        lines = text.splitlines()
        longest = max(lines, key=len)
        assert len(longest) <= LATEX_WIDTH, f"{name}/{s.name}: {len(longest)} characters: {longest}"
        body = [ln for ln in lines if not ln.startswith("%")]
        assert body[0] == r"\begin{align}" and body[-1] == r"\end{align}"
        # one row per state (a continuation row carries no new left-hand side)
        assert sum(r"\dot{" in ln.split("&")[0] for ln in body) == len(s.state)


def _rows_to_equations(rows: list[str]) -> list[tuple[str, str, str]]:
    """``[(lhs, op, rhs text)]`` from printed rows, continuation rows joined to their equation."""
    eqs: list[list[str]] = []
    for row in rows:
        row = row.removesuffix(" \\\\").removesuffix(r" \nonumber")
        if row.startswith(_Lines.CONT):
            eqs[-1][2] += " " + row[len(_Lines.CONT):]
        else:
            lhs, op, rhs = row.partition(" &:= ") if " &:= " in row else row.partition(" &= ")
            eqs.append([lhs, op.strip(" &"), rhs])
    return [tuple(e) for e in eqs]


@pytest.mark.parametrize("width", [40, 60, 90])
def test_breaking_keeps_every_term(width):
    """The breaking logic run with sympy's plain-text printer: parse the rows back, substitute the
    named intermediates, and get the original right-hand sides exactly (no term lost or
    sign-flipped)."""
    s = _long_sum_system()
    out = _Lines(set(s.state) | set(s.parameters), width=width, printer=sp.StrPrinter())
    rows = []
    for st, f in zip(s.state, s.rhs):
        rows += out.lines(st, "=", f)
    assert len(out.names) >= 1  # the sums did not fit: intermediates were named
    assert max(len(r) for r in rows) <= width + 30  # str printing is longer than LaTeX on a few atoms
    local = {str(v): v for v in (*s.state, *s.parameters, *out.names.values())}
    defs, got = {}, {}
    for lhs, op, rhs in _rows_to_equations(rows):
        expr = sp.parse_expr(rhs, local_dict=local)
        if op == ":=":
            defs[local[lhs]] = expr
        else:
            got[lhs] = expr
    for _ in range(len(defs) + 1):
        got = {k: v.xreplace(defs) for k, v in got.items()}
    for st, f in zip(s.state, s.rhs):
        assert sp.simplify(got[str(st)] - f) == 0


def test_intermediates_are_defined_before_use_and_do_not_clash():
    s = _long_sum_system()
    text = to_latex(s)
    assert text.startswith("% u_{1}")  # named in a comment line before the environment
    seen = set()
    for line in text.splitlines()[2:-1]:
        lhs = line.split("&")[0].strip()
        for used in {f"u_{{{k}}}" for k in range(1, 30)} & set(line.replace("{", " {").split()) - {lhs}:
            assert used in seen, f"{used} used before its definition: {line}"
        if ":=" in line:
            seen.add(lhs)
    # a system that already uses u gets another letter
    u = sp.Symbol("u_1", real=True)
    s2 = ReducedSystem(name="u", paper="toy", state=(u,), parameters=s.parameters,
                       rhs=(sum(a * u**i for i, a in enumerate(s.parameters, 1)) ** 2,))
    text2 = to_latex(s2, width=60)
    assert text2.startswith("% w_{1}") and "u_{1} &:=" not in text2


def test_dot_over_base_readable_order_and_lambda():
    xi1, T, Q, lam = sp.symbols("xi_1 T Q lam", positive=True)
    s = ReducedSystem(name="t", paper="toy", state=(xi1,), parameters=(T, Q, lam), rhs=(T - Q * lam,))
    text = to_latex(s)
    assert r"\dot{\xi}_{1} &= T - Q \lambda" in text
    assert r"\dot{\xi_{1}}" not in text
    assert latex(1 - sp.Symbol("eta_1") * sp.Symbol("zeta")) == r"1 - \eta_{1} \zeta"


def test_noise_covariance_is_printed_when_present():
    """A system with ``noise.covariance`` (set by hand here) prints
    Sigma = Cov/B and the upper triangle of the covariance's non-zero entries."""
    x, y = sp.symbols("x y", real=True)
    B, s2 = sp.symbols("B sigma", positive=True)
    sys_ = ReducedSystem(name="n", paper="toy", state=(x, y), parameters=(s2, B), rhs=(-x, -y))
    assert r"\Sigma" not in to_latex(sys_)
    cov = sp.Matrix([[s2**2, 0], [0, s2**2 * x**2]])
    object.__setattr__(sys_, "noise", SimpleNamespace(covariance=cov, batch_symbol=B))
    text = to_latex(sys_)
    assert r"\Sigma(\theta) &= \frac{1}{B}\,\mathrm{Cov}_x[g]" in text
    assert r"\mathrm{Cov}_x[g]_{x\,x} &= \sigma^{2}" in text
    assert r"\mathrm{Cov}_x[g]_{y\,y} &= \sigma^{2} x^{2}" in text
    assert r"_{x\,y}" not in text  # a zero entry is not printed


def test_rows_render_in_mathtext():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.mathtext import MathTextParser

    parser = MathTextParser("agg")
    for line in to_latex(_long_sum_system()).splitlines():
        if line.startswith(("%", r"\begin", r"\end")):
            continue
        parser.parse("$" + line.removesuffix(" \\\\").removesuffix(r" \nonumber").replace("&", "") + "$")


def test_cli_latex_is_a_complete_environment_and_standalone_a_document():
    runner = CliRunner()
    res = runner.invoke(main, ["derive", "scb", "--format", "latex", "--no-cache"])
    assert res.exit_code == 0, res.output
    assert res.stdout.count(r"\begin{align}") == res.stdout.count(r"\end{align}") == len(_systems("scb"))
    doc = runner.invoke(main, ["derive", "scb", "--standalone", "--no-cache"]).stdout
    assert doc.startswith(r"\documentclass") and doc.rstrip().endswith(r"\end{document}")
    bad = runner.invoke(main, ["derive", "scb", "--standalone", "--format", "json"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: standalone:")


needs_tex = pytest.mark.skipif(not have_tex(), reason="no pdflatex/pdftotext (.ci/run installs them)")


@pytest.mark.parametrize("name", PAPER_NAMES)
def test_standalone_lines_fit_and_descriptions_are_latex_math(name):
    """No line of ``--format latex`` or ``--standalone`` over 120 characters; every ``$...$`` span of
    a description renders in mathtext, and the prose outside them holds no ASCII math (``^``, ``*``,
    ``<``, ``>``, ``|``: written as math instead)."""
    from matplotlib.mathtext import MathTextParser

    from theory.export import _MATH

    runner = CliRunner()
    for args in (["--format", "latex"], ["--standalone"]):
        out = runner.invoke(main, ["derive", name, *args, "--no-cache"]).stdout
        longest = max(out.splitlines(), key=len)
        assert len(longest) <= LATEX_WIDTH, f"{name} {args}: {len(longest)} characters: {longest}"
    parser = MathTextParser("agg")
    for s in _systems(name):
        for text in (s.description, s.noise.description if s.noise is not None else ""):
            for m in _MATH.finditer(text):
                parser.parse(m.group(0))
            prose = _MATH.sub(" ", text)
            assert not set("^*<>|") & set(prose), f"{name}/{s.name}: ASCII math in the prose: {prose}"


@needs_tex
@pytest.mark.parametrize("name", PAPER_NAMES)
def test_standalone_document_compiles_with_its_prose_intact(name, tmp_path):
    """pdflatex compiles the document; pdftotext reads every word of each description's prose
    back in order (the math typeset between them) and no character garbled."""
    from theory.export import _MATH

    systems = _systems(name)
    text = pdf_text(latex_document(name, [(s, to_latex(s)) for s in systems]), tmp_path)
    assert not [c for c in GARBLED if c in text], text[:2000]
    for s in systems:
        assert s.name in text
        words = [w for w in _MATH.sub(" ", s.description).split() if w.isalpha()]
        pos = 0
        for w in words:  # in order: nothing dropped or turned into other characters
            pos = text.find(w, pos)
            assert pos >= 0, f"{name}/{s.name}: {w!r} missing from the PDF's text"


@needs_tex
def test_special_characters_of_prose_survive_pdflatex(tmp_path):
    """``|``, ``<``, ``>`` and LaTeX's specials in prose come out of the PDF as typed; ``$...$``
    is typeset as math (its letters, not the dollars)."""
    x = sp.Symbol("x", real=True)
    prose = r"n = |a|^2, c = <a, q> & 5% of #1 under_score {b} ~ back\slash; math $\zeta_{1}$ here"
    s = ReducedSystem(name="chars", paper="toy", state=(x,), parameters=(), rhs=(-x,), spec="toy §1",
                      description=prose)
    text = pdf_text(latex_document("toy", [(s, to_latex(s))]), tmp_path)
    assert r"n = |a|^2, c = <a, q> & 5% of #1 under_score {b} ~ back\slash; math ζ" in text
    assert "$" not in text and not [c for c in GARBLED if c in text]


def test_finite_noise_with_an_implicit_covariance_prints_the_outcome_form():
    """A Finite noise derived with ``covariance=False`` prints Sigma as the sum over its outcomes,
    the per-sample flow row by row and each outcome (rows within the width, rendering in mathtext)."""
    from matplotlib.mathtext import MathTextParser

    from theory.noise import Finite, derive_noise

    a, b = sp.symbols("a b", real=True)
    ys = sp.symbols("y_1:13", real=True)
    cs = sp.symbols("c_1:13", real=True)
    loss = sum((a - y) ** 2 for y in ys) / 2 + b * sum(ys)
    dist = Finite(({y: c for y, c in zip(ys, cs)}, {y: -c for y, c in zip(ys, cs)}), (sp.Rational(1, 4), sp.Rational(3, 4)))
    noise = derive_noise(loss, (a, b), ys, dist, covariance=False)
    s = ReducedSystem(name="n", paper="toy", state=(a, b), parameters=cs, rhs=tuple(noise.mean), noise=noise)
    text = to_latex(s)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= LATEX_WIDTH
    assert r"\Sigma(\theta) &= \frac{1}{B} \sum_{k} p_{k}" in text and r"\mathrm{Cov}" not in text
    assert sum(ln.startswith((r"g_{a} &= ", r"g_{b} &= ")) for ln in lines) == 2  # the per-sample flow, per state
    assert r"x^{(2)} &: p_{2} = \frac{3}{4},\ y_{1} = - c_{1}" in text
    assert sum(ln.startswith(r"&\quad y_{") for ln in lines) >= 2  # 12 assignments do not fit one row
    parser = MathTextParser("agg")
    for line in lines[1:-1]:
        parser.parse("$" + line.removesuffix(" \\\\").removesuffix(" \\nonumber").replace("&", "") + "$")
