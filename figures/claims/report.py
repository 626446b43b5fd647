"""How decided claims are shown: the text table (``tdyn claims``, the ``claims`` table of ``tdyn
compare``), the validity-map figure and table per claim, ``claims.json`` beside a paper's
figures, and ``figures/out/claims.md`` with the summary ``tdyn reproduce`` ends with.

Everything here reads the JSON form of a :class:`figures.claims.ClaimResult` (``to_json()``, the
shape documented in ``docs/claims.md``), so a table can be rebuilt from a ``claims.json`` without
recomputing anything.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["claims_table", "claims_latex", "claim_lines", "fig_claim_map", "map_table", "write_claim_outputs", "read_claims",
           "claims_summary", "write_claims_md", "tally", "CLAIMS_JSON"]

#: a paper's decided claims, beside its figures: ``<outdir>/claims/claims.json``
CLAIMS_JSON = Path("claims") / "claims.json"
_SYMBOL = {"holds": "✓", "fails": "✗", "inconclusive": "?", "untested": "–", None: "–"}
_COLOUR = {"holds": "tab:green", "fails": "tab:red", "inconclusive": "tab:gray", "untested": "black", None: "black"}


def _doc(r: Any) -> dict[str, Any]:
    return r if isinstance(r, Mapping) else r.to_json()


def _n(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _coords(c: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={_n(v)}" for k, v in c.items())


def _stat_ci(d: Mapping[str, Any]) -> str:
    """``name = estimate [lo, hi]`` of a decided claim (``n/a`` where undecided)."""
    lo, hi = d["interval"] or [None, None]
    est = d["estimate"]
    return f"{d['statistic']['name']} = " + ("n/a" if est is None or lo is None else f"{_n(est)} [{_n(lo)}, {_n(hi)}]")


def _mde(d: Mapping[str, Any]) -> str:
    """The minimal detectable effect in words (80% power at the seeds and points used)."""
    m = d.get("mde") or {}
    parts = []
    for v, side in (("holds", "holding"), ("fails", "failing")):
        x = m.get(v)
        if x is None:
            parts.append(f"'{v}' cannot fire")
        elif "q" in x:
            shift = f", a shift of ~{_n(x['shift'])}" if x.get("shift") is not None else ""
            parts.append(f"'{v}' needs P(seed on the {side} side) >= {x['q']:.2f} per point{shift}")
        elif "proportion" in x:
            parts.append(f"'{v}' needs a proportion {x['distance']:.2f} beyond the boundary")
        else:
            parts.append(f"'{v}' needs a mean {x['sd_units']:.2f} SD beyond the boundary")
    return "; ".join(parts)


def _evidence_line(d: Mapping[str, Any]) -> str:
    """Test, family level and what the practice side is; the null control and the theory check."""
    null = d.get("null")
    if null is None:
        null_text = "null control: none"
    else:
        disc = {True: " (discriminating)", False: " — NOT DISCRIMINATING", None: ""}[null.get("discriminating")]
        null_text = f"null ({' '.join(null['description'].split())}): " \
                    f"{null['verdict'] or null.get('note') or 'undecided'}{disc}"
    th = d.get("theory_check") or {}
    flow = "exact flow" if th.get("exact") else "reduced theory" if th.get("flow") else "no theory"
    theory_text = f"theory ({flow}): {th.get('verdict') or 'n/a'}"
    robust = d.get("robust")
    rob = "" if robust is None else f"; robust: {'yes' if robust else 'no'} (" + ", ".join(
        f"{x['name']}: {x['verdict']}" for x in d.get("robustness", [])) + ")"
    return f"    {null_text}; {theory_text}; practice: {d.get('practice', 'n/a')}{rob}"


def claim_lines(r: Any) -> list[str]:
    """One claim in seven lines: name, verdict, grade; statement; regime; statistic ± CI at the
    deciding point; the test, its level and minimal detectable effect; the null control, the theory
    check and the practice side; where it breaks."""
    d = _doc(r)
    extra = f"; {d['failed_cells']} map cell(s) failed" if d.get("failed_cells") else ""
    demo = [x for x in d.get("demo", []) if not x["inside"]]
    demo_text = "".join(f"; paper's setting {x['label']!r} outside the regime: {x['verdict'] or 'undecided'}"
                        for x in demo)
    return [wrapped for line in [
        f"  {d['name']:32s} {d['verdict'].upper():13s} grade {d['grade']} "
        f"({d['seeds']} seeds, {d['regime_points']} regime points, {d.get('mode', 'quick')}){extra}",
        f"    {' '.join(d['statement'].split())}",
        f"    regime: {'; '.join(x['holds_in'] for x in d['regime'])}{demo_text}",
        f"    {_stat_ci(d)}, holds when {d['criterion']['holds_when']}; at {_coords(d['at']) or '-'}",
        f"    test: {d.get('test', d.get('method', '')).split(',')[0]}, Holm over {d['regime_points']} in-regime "
        f"points, family level {d.get('family_level', 0.05):g}; 80% power: {_mde(d)}",
        _evidence_line(d),
        f"    breaks: {d['where_it_breaks']}",
    ] for wrapped in wrap_line(line)]


def wrap_line(line: str, width: int = 120) -> list[str]:
    """``line`` wrapped at word boundaries to ``width`` characters, continuation lines indented two
    more than the line (a word is never cut)."""
    import textwrap

    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip(" ")))
    return textwrap.wrap(line, width=width, subsequent_indent=indent + "  ", break_long_words=False,
                         break_on_hyphens=False)


def claims_table(results: Sequence[Any], title: str = "") -> str:
    """The claims of a paper, readable in a minute (evidence only in ``--json``)."""
    if not results:
        return f"{title}: no claims" if title else "no claims"
    d0 = _doc(results[0])
    head = (f"claims{' of ' + title if title else ''} (seed as unit; a false 'holds' and a false 'fails' each at "
            f"most {1 - d0['level']:.2g} over each map's in-regime points; verdicts: holds | fails | inconclusive | "
            f"untested)")
    lines = wrap_line(head)
    for r in results:
        lines += claim_lines(r)
    return "\n".join(lines)


def claims_latex(results: Sequence[Any], title: str = "") -> str:
    """The claims of a paper as a LaTeX ``table`` to paste into a document with
    ``\\usepackage{booktabs}``: one row per claim — claim, verdict, statistic with its interval at
    the deciding point, seeds, grade and test — under a caption with the tests' family level."""
    from theory.export import tex_text

    level = _doc(results[0])["level"] if results else 0.95
    caption = (f"Claims{' of ' + title if title else ''}, decided over seeds inside the paper's regime "
               f"(a false `holds' and a false `fails' each at most {1 - level:.2g} over a claim's in-regime points).")
    lines = [r"\begin{table}[htbp]", r"\centering", r"\small", rf"\caption{{{tex_text(caption)}}}",
             r"\begin{tabular}{@{}llllrl@{}}", r"\toprule",
             r"Claim & Verdict & Statistic & Estimate [interval] & Seeds & Grade (test) \\", r"\midrule"]
    for r in results:
        d = _doc(r)
        lo, hi = d["interval"] or [None, None]
        est = d["estimate"]
        value = "n/a" if est is None or lo is None else f"{_n(est)} [{_n(lo)}, {_n(hi)}]"
        test = d.get("test", d.get("method", "")).split(",")[0]
        cells = [d["name"], d["verdict"], d["statistic"]["name"], value, str(d["seeds"]),
                 f"{d['grade']} ({test})" if test else str(d["grade"])]
        lines.append(" & ".join(tex_text(c) for c in cells) + r" \\")
    if not results:
        lines.append(r"\multicolumn{6}{@{}l}{no claims} \\")
    label = "".join(ch if ch.isalnum() else "-" for ch in title) or "paper"
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}", rf"\label{{tab:claims-{label}}}", r"\end{table}", ""])


# ------------------------------------------------------------------------------------------------
# The validity map: figure and table
# ------------------------------------------------------------------------------------------------
def map_table(r: Any) -> list[dict[str, Any]]:
    """One row per map point: the axes' values, inside the regime, seeds, estimate, interval,
    verdict, the theory's statistic, notes."""
    d = _doc(r)
    rows = []
    for p in d["map"]["points"]:
        lo, hi = p["interval"] or [None, None]
        th = p["theory"]
        rows.append({**p["coords"], "inside_regime": p["inside"], "seeds": p["seeds"], "estimate": p["estimate"],
                     "ci_low": lo, "ci_high": hi, "verdict": p["verdict"] or "undecided",
                     "theory": th[0] if len(th) == 1 else (sum(th) / len(th) if th else None),
                     "theory_verdict": p["theory_verdict"], "note": p["note"] or "; ".join(p["violated"]),
                     "paper_setting": p.get("demo", "")})
    return rows


def fig_claim_map(r: Any, outdir: str | Path | None, name: str | None = None) -> dict[str, Any]:
    """The validity map of one decided claim: the statistic with its interval over the map axis
    (one axis), or a heatmap of the estimate over two axes (panels over a third), the criterion's
    boundary and the regime marked, each point's verdict shown. Written as
    ``outdir/claims/<name>.png``; returns the plotted rows."""
    import matplotlib.pyplot as plt

    from ..core import finish_figure

    d = _doc(r)
    axes = d["map"]["axes"]
    rows = map_table(d)
    if not rows:  # nothing run (untested): say so instead of an empty map
        import textwrap

        fig, ax = plt.subplots(figsize=(6.4, 2.2))
        ax.axis("off")
        ax.set_title(_title(d), fontsize=9)
        ax.text(0.5, 0.45, textwrap.fill(f"not run: {d.get('untested_reason') or d['where_it_breaks']}", 90),
                ha="center", va="center", fontsize=8, transform=ax.transAxes)
        finish_figure(fig, None if outdir is None else Path(outdir) / "claims", f"{name or d['name']}.png")
        return {"rows": rows, "axes": [a["name"] for a in axes]}
    if len(axes) == 1:
        fig = _line_map(plt, d, axes[0], rows)
    else:
        fig = _heat_map(plt, d, axes, rows)
    finish_figure(fig, None if outdir is None else Path(outdir) / "claims", f"{name or d['name']}.png")
    return {"rows": rows, "axes": [a["name"] for a in axes]}


def _title(d: Mapping[str, Any], width: int = 100) -> str:
    """The map's title: the claim's statement (its first sentence, without a formula after a colon; identifiers
    such as ``eta_V`` as mathtext), wrapped to ``width`` characters, then the verdict and the
    criterion in words (no internal names: the lint of figures.style refuses them)."""
    import re
    import textwrap

    from ..style import _INTERNAL, math as tex, symbol_like, words

    text = " ".join(str(d.get("statement") or d["name"]).split())
    # the first sentence: a full stop before a capital, not after an abbreviation (Fig. 2, Eqn. 5, e.g.)
    head = re.split(r"(?<![Ff]ig)(?<!Eqn)(?<!Thm)(?<!e\.g)(?<!i\.e)(?<!vs)(?<=[a-z0-9)\]])\. (?=[A-Z])", text,
                    maxsplit=1)[0].rstrip(".")
    before, colon, after = head.partition(": ")
    if colon and "=" in after and len(before) >= 40:  # "...: t* = formula": the words say it
        head = before
    head = re.sub(r"\s*\([^()]*(?:§|spec|Eqn|Thm)[^()]*\)", "", head)  # citations: the report has them
    head = _INTERNAL.sub(lambda m: tex(m.group()) if symbol_like(m.group()) else words(m.group()), head)
    head = re.sub(r"\$([^$]*)\$\^(\w+|\([^()]*\))", r"$\1^{\2}$", head)  # "$v_{k}$^2" -> "$v_{k}^{2}$"
    n = max(1, round(len(head) / width + 0.4))  # a tenth over the width still fits one line
    lines = textwrap.wrap(head, math.ceil(len(head) / n) + 6, break_on_hyphens=False)  # balanced lines, no widow word
    if len(lines) > 3:
        lines = lines[:3]
        lines[-1] = lines[-1].rstrip(",;") + " …"
    return "\n".join(lines + [f"verdict: {d['verdict']} (grade {d['grade']}, {d['seeds']} seeds); holds when "
                              f"{_stat_words(d)} {d['criterion']['holds_when']}"])


def _stat_words(d: Mapping[str, Any]) -> str:
    from ..style import words

    return words(d["statistic"]["name"])


def _stat_label(d: Mapping[str, Any], width: int = 34) -> str:
    """The statistic in words, its symbol and unit (a colourbar's or y axis' label), wrapped."""
    st = d["statistic"]
    unit = st.get("unit") or ""
    text = " ".join(x for x in (_stat_words(d), st.get("symbol") or "", f"({unit})" if unit else "") if x)
    # wrap between words, never inside $...$
    parts, out, line = text.split("$"), [], ""
    tokens = [tok for i, part in enumerate(parts) for tok in ([f"${part}$"] if i % 2 else part.split())]
    for tok in tokens:
        if line and len(line) + 1 + len(tok) > width and not tok.startswith("$"):
            out.append(line)
            line = tok
        else:
            line = f"{line} {tok}".strip()
    return "\n".join(out + [line])


def _axis_text(axis: Mapping[str, Any]) -> str:
    """A map axis' label, with the quantity's name in words when the label is only a symbol."""
    import re

    from ..style import _outside_math, words

    label = axis.get("label") or axis["name"]
    if re.search(r"[A-Za-z]{3,}", _outside_math(label)):
        return label
    name = axis["name"]
    what = _SYMBOL_WORDS.get(name.split("_")[0], words(name))  # eta_Y -> learning rate (not "eta Y")
    return f"{what}{' ratio' if '/' in label else ''} {label}"


#: the words of a map axis named by a symbol (its label only a formula)
_SYMBOL_WORDS = {"eta": "learning rate", "lr": "learning rate", "lam": "regularisation strength",
                 "lambda": "regularisation strength", "T": "context length", "B": "batch size", "batch": "batch size",
                 "t": "time", "tau": "time", "K": "number of classes", "M": "vocabulary size"}


def _line_map(plt, d, axis, rows):
    fig, ax = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    name = axis["name"]
    xs = [row[name] for row in rows]
    numeric = all(isinstance(x, (int, float)) for x in xs)
    pos = xs if numeric else list(range(len(xs)))
    if axis["scale"] == "log":
        ax.set_xscale("log")
    for x, row in zip(pos, rows):  # regime: grey span around points outside it
        if not row["inside_regime"]:
            lo, hi = _span(pos, x, axis["scale"])
            ax.axvspan(lo, hi, color="0.88", zorder=0)
    shown = set()
    for x, row in zip(pos, rows):
        v = row["verdict"] if row["verdict"] != "undecided" else None
        if row["estimate"] is None:
            continue
        label = None if v in shown else (v or "undecided")
        shown.add(v)
        # the point (a curve the legend names by its verdict's colour) and its interval as a bar
        ax.plot([x], [row["estimate"]], "o", color=_COLOUR[v], label=label)
        if row["ci_low"] is not None and row["ci_high"] is not None:
            ax.vlines(x, row["ci_low"], row["ci_high"], color=_COLOUR[v], lw=1.5)
    demo = [(x, row["estimate"]) for x, row in zip(pos, rows) if row["paper_setting"] and row["estimate"] is not None]
    if demo:
        ax.plot(*zip(*demo), "s", ms=11, mfc="none", mec="goldenrod", mew=1.8, label="the paper's setting")
    th = [(x, row["theory"]) for x, row in zip(pos, rows) if row["theory"] is not None and math.isfinite(row["theory"])]
    if th:
        ax.plot(*zip(*th), "k--", lw=1, marker="x", label="theory")
    _boundary(ax.axhline, d["criterion"])
    if any(not row["inside_regime"] for row in rows):
        from matplotlib.patches import Patch

        ax.add_artist(ax.legend(handles=[Patch(color="0.88", label="outside the regime")], loc="upper left",
                                bbox_to_anchor=(1.01, 0.25), fontsize=8))
    ax.set_xlabel(_axis_text(axis))
    from matplotlib.ticker import NullFormatter

    ax.set_xticks(*_spaced_ticks(ax, pos, [_n(x) if numeric else str(x) for x in xs]))  # the map's points
    ax.xaxis.set_minor_formatter(NullFormatter())  # a log axis' minor labels would collide with them
    ax.set_ylabel(_stat_label(d, 60))
    fig.suptitle(_title(d, 90), fontsize=8.5)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return fig


def _spaced_ticks(ax, pos, labels, gap: float = 0.09):
    """The points' ticks, each at least ``gap`` of the axis width from the last one kept (labels
    of close points would overlap): ``(positions, labels)``."""
    to_axes = lambda x: ax.transLimits.transform(ax.transScale.transform((x, 0.0)))[0]  # noqa: E731
    ax.get_xlim()  # settle the limits
    kept = []
    for p, lab in sorted(zip(pos, labels), key=lambda t: t[0]):
        if not kept or to_axes(p) - to_axes(kept[-1][0]) >= gap:
            kept.append((p, lab))
    return [p for p, _ in kept], [lab for _, lab in kept]


def _span(pos, x, scale):
    i = pos.index(x)
    mid = (lambda a, b: math.sqrt(a * b)) if scale == "log" else (lambda a, b: (a + b) / 2)
    lo = mid(pos[i - 1], x) if i > 0 else (x / 1.5 if scale == "log" else x - 0.5 * (pos[1] - pos[0] if len(pos) > 1 else 1))
    hi = mid(x, pos[i + 1]) if i + 1 < len(pos) else (x * 1.5 if scale == "log" else x + 0.5 * (pos[-1] - pos[-2] if len(pos) > 1 else 1))
    return lo, hi


def _boundary(line, crit):
    b = crit["boundary"]
    for i, v in enumerate(b if isinstance(b, list) else [b]):
        line(v, color="tab:blue", ls=":", lw=1.2, label=None if i else f"boundary (holds when {crit['holds_when']})")


def _colour_scale(crit, finite):
    """``(norm, cmap, bounds)`` of a heat map: one norm for every panel. A one-sided criterion: a
    diverging map centred on the boundary (blue: the holding side), symmetric around it. A window
    ("inside"): a sequential map over the window widened by a quarter of its width on each side and
    stretched to every value, so the window, not the spread of the values, sets the scale."""
    import numpy as np
    from matplotlib.colors import Normalize, TwoSlopeNorm

    b = crit["boundary"]
    if crit["direction"] == "inside" and isinstance(b, list) and len(b) == 2:
        lo, hi = float(b[0]), float(b[1])
        pad = 0.25 * (hi - lo) if hi > lo else 1.0
        vmin = min([lo - pad, *finite.tolist()])
        vmax = max([hi + pad, *finite.tolist()])
        return Normalize(vmin=vmin, vmax=vmax), "cividis", [lo, hi]
    if crit["direction"] == "inside" or finite.size == 0:
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        return Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1.0), "cividis", []
    b = float(b)
    span = max(float(np.max(np.abs(finite - b))), 0.05 * abs(b), 1e-12)
    norm = TwoSlopeNorm(vcenter=b, vmin=b - span, vmax=b + span)
    return norm, ("RdBu_r" if crit["direction"] == "below" else "RdBu"), [b]


def _heat_map(plt, d, axes, rows):
    import matplotlib
    import numpy as np
    from matplotlib.patches import Patch

    from ..style import grid_columns, text_colour

    ax0, ax1 = axes[0], axes[1]
    panels = [None] if len(axes) == 2 else list(dict.fromkeys(row[axes[2]["name"]] for row in rows))
    xs = list(dict.fromkeys(row[ax0["name"]] for row in rows))
    ys = list(dict.fromkeys(row[ax1["name"]] for row in rows))
    est = np.array([row["estimate"] if row["estimate"] is not None else np.nan for row in rows], dtype=float)
    crit = d["criterion"]
    norm, cmap, bounds = _colour_scale(crit, est[np.isfinite(est)])
    cmap = plt.get_cmap(cmap)
    ncols = grid_columns(len(panels))  # a page's layout: at most three per row, no avoidable empty cell
    nrows = math.ceil(len(panels) / ncols)
    width = max(3.0 + 1.1 * len(xs) * ncols, 6.4)
    fig, grid_axes = plt.subplots(nrows, ncols, figsize=(width, (2.4 + 0.5 * len(ys)) * nrows + 0.6),
                                  squeeze=False, layout="constrained")
    flat = list(grid_axes.ravel())
    for ax in flat[len(panels):]:
        fig.delaxes(ax)
    axs = flat[:len(panels)]
    im = None
    for ax, panel in zip(axs, panels):
        grid = np.full((len(ys), len(xs)), np.nan)
        for row in rows:
            if panel is not None and row[axes[2]["name"]] != panel:
                continue
            i, j = ys.index(row[ax1["name"]]), xs.index(row[ax0["name"]])
            grid[i, j] = np.nan if row["estimate"] is None else row["estimate"]
            v = row["verdict"] if row["verdict"] != "undecided" else None
            cell = cmap(norm(grid[i, j])) if np.isfinite(grid[i, j]) else (1.0, 1.0, 1.0, 1.0)
            # black or white, whichever reads on the cell; the box (the cell's own colour, opaque) keeps
            # the hatching of points outside the regime off the digits
            ax.text(j, i, f"{_SYMBOL[v]} {_n(row['estimate'])}", ha="center", va="center", fontsize=7, zorder=5,
                    color=text_colour(cell), bbox={"boxstyle": "round,pad=0.2", "fc": cell, "ec": "none"})
            if not row["inside_regime"]:
                hatch = (*matplotlib.colors.to_rgb(text_colour(cell)), 0.55)  # visible on light and dark cells
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", ec=hatch, lw=0,
                                           zorder=2))
            if row["paper_setting"]:
                ax.add_patch(plt.Rectangle((j - 0.47, i - 0.47), 0.94, 0.94, fill=False, ec="goldenrod", lw=2.0,
                                           zorder=3))
        im = ax.imshow(grid, origin="lower", aspect="auto", cmap=cmap, norm=norm)
        ax.grid(False)  # the style's grid would cut through the cells
        ax.set_xticks(range(len(xs)), [_n(x) for x in xs])
        ax.set_yticks(range(len(ys)), [_n(y) for y in ys])
        ax.set_xlabel(_axis_text(ax0))
        ax.set_ylabel(_axis_text(ax1))
        if panel is not None:
            ax.set_title(f"{_axis_text(axes[2])} = {_n(panel)}", fontsize=8)
    cb = fig.colorbar(im, ax=axs)
    what = "lines: the criterion's window" if len(bounds) == 2 else "line: the criterion's boundary"
    cb.set_label(_stat_label(d) + (f"\n({what})" if bounds else ""))
    for b in bounds:  # the criterion's boundary (or window) on the colour scale
        cb.ax.axhline(b, color="black", lw=2.4)
        cb.ax.axhline(b, color="white", lw=0.8, ls="--")
    if bounds:
        gap = 0.07 * (norm.vmax - norm.vmin)  # the bounds' own ticks; none crowding them
        cb.set_ticks(sorted({*[t for t in cb.get_ticks() if norm.vmin <= t <= norm.vmax
                               and min(abs(t - b) for b in bounds) > gap], *bounds}))
    handles = [Patch(fill=False, hatch="///", ec="0.5", label="outside the regime")]
    if any(row["paper_setting"] for row in rows):
        handles.append(Patch(fill=False, ec="goldenrod", lw=2.0, label="the paper's setting"))
    fig.legend(handles=handles, fontsize=7, loc="outside lower left", frameon=False, ncols=2)
    fig.suptitle(_title(d, int(width * 14)) + f"\n{_SYMBOL['holds']} holds, {_SYMBOL['fails']} fails, "
                 f"? inconclusive, {_SYMBOL[None]} undecided", fontsize=8)
    return fig


def write_claim_outputs(results: Sequence[Any], outdir: str | Path) -> list[Path]:
    """Per claim its map figure (``claims/<name>.png``) and table (``claims/<name>.csv``); then
    ``claims/claims.json`` (every result's JSON, with ``figure`` and ``table`` paths relative to
    ``outdir``). Written through :mod:`figures.core` (atomic, recorded by the collector)."""
    from ..core import save_table, write_output

    out = Path(outdir)
    docs = []
    for r in results:
        d = _doc(r)
        fig_claim_map(d, out)
        save_table(map_table(d), out / "claims", f"{d['name']}.csv")
        docs.append({**d, "figure": f"claims/{d['name']}.png", "table": f"claims/{d['name']}.csv"})
    path = write_output(out / CLAIMS_JSON, lambda tmp: Path(tmp).write_text(json.dumps(docs, indent=2)))
    return [out / "claims" / f"{d['name']}{ext}" for d in docs for ext in (".png", ".csv")] + [path]


# ------------------------------------------------------------------------------------------------
# Every paper: the summary and claims.md
# ------------------------------------------------------------------------------------------------
def read_claims(out_root: str | Path, rows: Sequence[Any]) -> dict[str, list[dict[str, Any]] | str]:
    """Per paper row: its decided claims (``<out_root>/<module>/claims/claims.json``), or one line
    saying why there are none."""
    out: dict[str, list[dict[str, Any]] | str] = {}
    for row in rows:
        path = Path(out_root) / row.module / CLAIMS_JSON
        if row.claims is None:
            out[row.name] = row.missing.get("claims", "no claims slot")
        elif not path.is_file():
            out[row.name] = f"not decided yet (no {path})"
        else:
            out[row.name] = json.loads(path.read_text())
    return out


def claims_summary(claims: Mapping[str, list[dict[str, Any]] | str]) -> str:
    """One line per claim of every paper: verdict, statistic ± CI, seeds, grade; then the tally."""
    lines = ["claims of every paper (details: figures/out/claims.md)"]
    for paper, docs in claims.items():
        if isinstance(docs, str):
            lines.append(f"  {paper:10s} -- {docs}")
            continue
        lines += [f"  {paper:10s} {d['name']:30s} {d['verdict'].upper():13s} {_stat_ci(d)}  {d['seeds']} seeds, "
                  f"grade {d['grade']}" for d in docs]
    lines.append("  tally: " + tally(claims))
    return "\n".join(lines)


def tally(claims: Mapping[str, list[dict[str, Any]] | str]) -> str:
    """``N claims: a hold, b fail, c inconclusive, d untested`` over every paper's decided claims."""
    from collections import Counter

    docs = [d for v in claims.values() if not isinstance(v, str) for d in v]
    c = Counter(d["verdict"] for d in docs)
    return (f"{len(docs)} claims: {c['holds']} hold, {c['fails']} fail, {c['inconclusive']} inconclusive, "
            f"{c['untested']} untested")


def _md_cell(v: Any) -> str:
    return str(_n(v) if not isinstance(v, str) else v).replace("|", "\\|").replace("\n", " ")


def write_claims_md(claims: Mapping[str, list[dict[str, Any]] | str], path: str | Path) -> Path:
    """``claims.md``: a summary table of every paper's claims, then per claim its statement,
    regime, criterion (with its derivation), falsifier, map figure (linked relative to ``path``)
    and map table."""
    from ..core import write_output

    path = Path(path)
    md = ["# Claims", "",
          "Each claim decided over seeds (the seed is the unit) inside the paper's regime, by tests whose "
          "family-wise error over a claim's in-regime points is at most 5% (`docs/claims.md`). Verdicts: "
          "holds | fails | inconclusive | untested (no in-regime point run). Grade A: >= 12 seeds and >= 6 "
          "regime points; B: >= 5 and >= 3; C below.", "", "**Tally:** " + tally(claims), "",
          "| paper | claim | verdict | statistic [CI] | seeds | grade | practice | null control | where it breaks |",
          "|---|---|---|---|---|---|---|---|---|"]
    for paper, docs in claims.items():
        if isinstance(docs, str):
            md.append(f"| {paper} | – | – | – | – | – | – | – | {_md_cell(docs)} |")
            continue
        md += [f"| {paper} | [{d['name']}](#{paper}-{d['name']}) | **{d['verdict']}** | {_md_cell(_stat_ci(d))} | "
               f"{d['seeds']} | {d['grade']} | {d.get('practice', '')} | "
               f"{_md_cell((d.get('null') or {}).get('verdict') or 'n/a')} | {_md_cell(d['where_it_breaks'])} |"
               for d in docs]
    for paper, docs in claims.items():
        if isinstance(docs, str):
            continue
        module = paper.replace("-", "_")
        for d in docs:
            md += ["", f'<a id="{paper}-{d["name"]}"></a>', f"## {paper}: {d['name']} — {d['verdict']} (grade {d['grade']})",
                   "", f"> {d['statement']} ({d['source']})", "",
                   "- **regime:** " + "; ".join(f"{x['holds_in']} ({x['assumption']})" for x in d["regime"]),
                   f"- **protocol:** {d['protocol']['network']}"
                   + (f", preset `{d['protocol']['preset']}`" if d["protocol"]["preset"] else "")
                   + (f", variant `{d['protocol']['variant']}`" if d["protocol"]["variant"] else ""),
                   f"- **statistic:** {d['statistic']['name']} — {d['statistic']['description']} "
                   f"({d['statistic']['estimator']} over seeds; {d['method']})",
                   f"- **criterion:** holds when {d['criterion']['holds_when']}. {d['criterion']['derivation']}",
                   f"- **falsifier:** {d['falsifier']}",
                   f"- **test:** {d.get('test', '')}; family level {d.get('family_level', 0.05):g}; "
                   f"detectable with 80% power: {_mde(d)}",
                   _evidence_line(d).strip().replace("null (", "**null control** (", 1),
                   f"- **where it breaks:** {d['where_it_breaks']}", ""]
            if d.get("figure"):
                md += [f"![{d['name']} validity map]({module}/{d['figure']})", ""]
            rows = map_table(d)
            if rows:
                cols = list(rows[0])
                md += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                md += ["| " + " | ".join(_md_cell(row[c]) for c in cols) + " |" for row in rows]
    text = "\n".join(md) + "\n"
    return write_output(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
