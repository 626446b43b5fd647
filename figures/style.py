"""tdyn's one figure style and the lint that checks a figure from its matplotlib objects.

* :data:`STYLE` — the shared matplotlib style file (``figures/tdyn.mplstyle``, package data);
  :func:`use` applies it (``figures.core`` does on import, so every figure function gets it).
* Labels: :func:`axis_label` (``"time $t$ (steps)"``: quantity, symbol, unit), :func:`math` (a sympy
  expression or symbol as mathtext through :func:`theory.export.latex` — the printer of the exported
  equations, so a figure and ``tdyn derive`` show the same symbols), :func:`symbol_labels` (every
  state, definition and observable of a :class:`~theory.ReducedSystem` as mathtext),
  :func:`quantity_label` (a name's symbol where the system has one, else words).
* Layout: :func:`panels` (``n`` panels, at most three per row, then a grid; room for a legend
  outside the axes), :func:`legend_outside` (one legend that names every curve and covers no data),
  :func:`heatmap` (image + colourbar, integer ticks for index axes), :func:`integer_ticks`.
* Theory vs practice: :data:`ROLES` / :func:`role` — line styles and markers (not colour only), so
  they stay apart in greyscale: theory solid black, SDE band hatched-edge fill, runs thin, a single
  trained curve with markers.
* :func:`lint` — the problems of a figure, read from its objects (not pixels): every axes with data
  has x and y labels that say in words what they show (not a bare symbol) and tick numbers on both
  axes that do not overlap; a legend naming every labelled curve where there is more than one, no
  two of its entries drawn alike and no entry standing for curves drawn differently; a colourbar
  for every image/mesh, labelled in words, with a perceptual colour map (no rainbow) and a scale
  wider than 2% of its values, over no other panel; no internal names (``snake_case``
  identifiers), raw LaTeX outside ``$...$`` or integers written as ``4.0`` in titles, labels or
  legends; a legend that covers no data point; text on an image legible against its cell
  (contrast at least 4.5) and not crossed by hatching; at most three panels per row and no empty
  grid cells where a fuller grid of at most three columns exists.
  :func:`figures.core.finish_figure` runs it and records the problems with the collector.
"""

from __future__ import annotations

import math as _math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import PathCollection, PolyCollection, QuadMesh  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

__all__ = ["STYLE", "use", "ROLES", "role", "math", "axis_label", "symbol_labels", "quantity_label", "panels",
           "legend_outside", "heatmap", "integer_ticks", "lint", "MAX_PER_ROW", "grid_columns", "run_alpha",
           "symbol_like", "text_colour", "contrast"]

#: the shared matplotlib style (package data)
STYLE = Path(__file__).resolve().with_name("tdyn.mplstyle")
#: panels per row before a figure becomes a grid
MAX_PER_ROW = 3

#: how each role is drawn: distinguishable by line style and marker, not by colour only
ROLES: dict[str, dict] = {
    "theory": {"color": "black", "linestyle": "-", "linewidth": 1.8, "zorder": 5},
    "theory_alt": {"color": "black", "linestyle": "--", "linewidth": 1.5, "zorder": 5},
    "practice": {"color": "#D55E00", "linestyle": ":", "marker": "o", "markersize": 3, "linewidth": 1.0,
                 "zorder": 4},
    "run": {"color": "#E69F00", "linestyle": "-", "linewidth": 0.7, "alpha": 0.5, "zorder": 2},
    "band": {"facecolor": "#0072B2", "alpha": 0.35, "edgecolor": "none", "zorder": 3},
    "band_edge": {"color": "#0072B2", "linestyle": "--", "linewidth": 0.9, "zorder": 3.5},
    "reference": {"color": "0.35", "linestyle": "-.", "linewidth": 0.9, "zorder": 1},
}


def use() -> None:
    """Apply the shared style to every figure made from now on."""
    plt.style.use(STYLE)


def role(name: str, **overrides) -> dict:
    """Keyword arguments for ``ax.plot`` / ``fill_between`` drawing ``name`` (a key of
    :data:`ROLES`), with ``overrides`` on top."""
    return {**ROLES[name], **overrides}


def run_alpha(n: int) -> float:
    """The opacity of each of ``n`` overlaid runs: :data:`ROLES` ``run`` alpha for a few, falling as
    ``6 / n`` (at least 0.2) so that many runs read as a density and never hide a band drawn with them."""
    return max(0.2, min(ROLES["run"]["alpha"], 6.0 / max(n, 1)))


# ------------------------------------------------------------------------------------------------
# Labels
# ------------------------------------------------------------------------------------------------
def math(expr) -> str:
    """``expr`` (a sympy expression, symbol, or a symbol name) as mathtext ``$...$`` with the
    printer of the exported equations (:func:`theory.export.latex`)."""
    import sympy as sp

    from theory.export import latex

    return "$" + latex(sp.Symbol(expr) if isinstance(expr, str) else expr) + "$"


def axis_label(quantity: str, unit: str | None = None, symbol=None) -> str:
    """``"quantity $symbol$ (unit)"``; ``symbol`` a sympy expression/symbol or mathtext (``$..$``),
    ``unit`` omitted for dimensionless quantities."""
    sym = "" if symbol is None else (symbol if isinstance(symbol, str) and symbol.startswith("$") else math(symbol))
    return " ".join(x for x in (quantity, sym, f"({unit})" if unit else "") if x)


#: the longest printed expression used as an observable's label (longer ones get words)
_MAX_LABEL = 48


def symbol_labels(system) -> dict[str, str]:
    """Name -> label: every state, parameter and definition symbol of ``system`` as mathtext, every
    observable as its name in words followed by its expression when that prints short
    (``value transition correlation $\\zeta$``): the labels of a figure use the symbols of the
    derivation."""
    from theory.export import latex

    out = {str(s): math(s) for s in (*system.state, *system.parameters, *(d for d, _ in system.definitions))}
    for name, expr in system.observables.items():
        tex = latex(expr)
        out.setdefault(name, words(name) + (f" ${tex}$" if len(tex) <= _MAX_LABEL else ""))
    return out


def words(name: str) -> str:
    """An internal name in words (``value_transition_correlation`` -> ``value transition correlation``)."""
    return name.replace("_", " ").strip()


def quantity_label(name: str, labels: Mapping[str, str] | None = None) -> str:
    """The label of a quantity: ``labels[name]`` (e.g. from :func:`symbol_labels`; ``value of`` a
    label that is only a symbol) where given,
    else a symbol-like name (a letter or Greek letter, an optional subscript: ``xi_1``, ``K``) as
    ``value of`` its mathtext, else the name in words."""
    if (labels or {}).get(name):
        label = labels[name]  # a state's label is its symbol alone: give it a word
        return label if re.search(r"[A-Za-z]{3,}", _outside_math(label)) else f"value of {label}"
    if symbol_like(name):
        return f"value of {math(name)}"  # a symbol alone is no label (the lint refuses it): at least a word
    return words(name)


def symbol_like(name: str) -> bool:
    """Whether ``name`` reads as a symbol: a letter or Greek letter with an optional subscript
    (``xi_1``, ``eta_V``, ``K``), not a word (``population_loss``)."""
    from sympy.printing.conventions import split_super_sub
    from sympy.printing.latex import greek_letters_set

    base = split_super_sub(name)[0]
    return bool(re.fullmatch(r"[A-Za-z]+(_[A-Za-z0-9]+)?", name)) and (len(base) == 1
                                                                        or base.lower() in greek_letters_set)


# ------------------------------------------------------------------------------------------------
# Layout
# ------------------------------------------------------------------------------------------------
def grid_columns(n: int) -> int:
    """Columns of a grid of ``n`` panels: at most :data:`MAX_PER_ROW`, the fewest empty cells (ties:
    more columns), so 4 panels make a 2 x 2 grid, not 3 + 1 with two empty cells."""
    if n <= MAX_PER_ROW:
        return max(n, 1)
    return min(range(MAX_PER_ROW, 1, -1), key=lambda c: _math.ceil(n / c) * c - n)


def panels(n: int, *, size: tuple[float, float] = (3.4, 2.6), sharex: bool = False, sharey: bool = False):
    """``(fig, axes)`` with ``n`` panels in :func:`grid_columns` columns (unused cells removed),
    constrained layout so that labels and an outside legend get their room; shared axes keep
    their tick numbers on every panel. ``axes`` is a flat list of the ``n`` axes."""
    ncols = grid_columns(n)
    nrows = _math.ceil(n / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False,
                             sharex=sharex, sharey=sharey, layout="constrained")
    flat = list(grid.ravel())
    for ax in flat[n:]:
        fig.delaxes(ax)
    for ax in flat[:n]:
        ax.tick_params(labelleft=True, labelbottom=True)
    return fig, flat[:n]


def legend_outside(fig, axes: Sequence | None = None, *, where: str = "below", ncols: int | None = None):
    """One figure legend naming every labelled curve of ``axes`` (default: all), each label once,
    placed outside the panels (``"below"`` or ``"right"``) so that it covers no data. Needs a
    constrained-layout figure (:func:`panels`). Returns the legend (None when nothing is labelled)."""
    handles, labels = [], []
    for ax in axes if axes is not None else fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if not labels:
        return None
    loc = "outside lower center" if where == "below" else "outside right upper"
    cols = ncols if ncols is not None else (min(len(labels), 4) if where == "below" else 1)
    return fig.legend(handles, labels, loc=loc, ncols=cols)


def integer_ticks(ax, axis: str = "both") -> None:
    """Integer tick positions on an index axis (``"x"``, ``"y"`` or ``"both"``)."""
    for which in ("x", "y") if axis == "both" else (axis,):
        getattr(ax, f"{which}axis").set_major_locator(MaxNLocator(integer=True))


def heatmap(ax, data, *, xlabel: str, ylabel: str, cbar_label: str, x=None, y=None, index_axes: str = "both",
            **kwargs):
    """``data`` (rows = y) as an image with a labelled colourbar; ``x``/``y`` cell centres (default
    indices 0..n-1, with integer ticks on the axes named in ``index_axes``). Returns the image."""
    data = np.asarray(data)
    if x is None and y is None:
        image = ax.imshow(data, origin="lower", aspect="auto", interpolation="nearest", **kwargs)
    else:
        xs = np.arange(data.shape[1]) if x is None else np.asarray(x)
        ys = np.arange(data.shape[0]) if y is None else np.asarray(y)
        image = ax.pcolormesh(xs, ys, data, shading="nearest", **kwargs)
    ax.figure.colorbar(image, ax=ax, label=cbar_label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(False)
    if index_axes:
        integer_ticks(ax, index_axes)
    return image


# ------------------------------------------------------------------------------------------------
# Text on coloured cells
# ------------------------------------------------------------------------------------------------
def _luminance(colour) -> float:
    """Relative luminance of a colour (WCAG 2: linearised sRGB weighted 0.2126, 0.7152, 0.0722)."""
    rgb = np.asarray(matplotlib.colors.to_rgb(colour), float)
    lin = np.where(rgb <= 0.03928, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return float(lin @ np.array([0.2126, 0.7152, 0.0722]))


def contrast(a, b) -> float:
    """The WCAG 2 contrast ratio of two colours, 1 (same luminance) to 21 (black on white)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def text_colour(background) -> str:
    """Black or white, whichever contrasts more with ``background`` (at least 4.58 for any colour)."""
    return "black" if contrast("black", background) >= contrast("white", background) else "white"


#: the least contrast of text against what is behind it (WCAG 2 AA for small text)
MIN_CONTRAST = 4.5
#: colour maps without a perceptually uniform lightness ramp (they invent bands and hide order)
_RAINBOW = {"jet", "rainbow", "gist_rainbow", "hsv", "nipy_spectral", "gist_ncar", "prism", "flag", "turbo"}


# ------------------------------------------------------------------------------------------------
# Lint
# ------------------------------------------------------------------------------------------------
#: an internal identifier: two or more word characters joined by underscores (``fig_headline``, ``z_dt_0``)
_INTERNAL = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")


def _outside_math(text: str) -> str:
    return re.sub(r"\$[^$]*\$", " ", text or "")


def _is_colorbar(ax) -> bool:
    return hasattr(ax, "_colorbar") or ax.get_label() == "<colorbar>"


def _series(ax) -> list:
    """The data series of an axes: lines in data coordinates (reference lines such as ``axhline``
    are not series), scatters and filled bands."""
    lines = [ln for ln in ax.get_lines() if ln.get_visible() and ln.get_transform() == ax.transData
             and len(np.atleast_1d(ln.get_xdata())) > 0]
    colls = [c for c in ax.collections if c.get_visible() and isinstance(c, (PathCollection, PolyCollection))
             and not isinstance(c, QuadMesh)]
    return lines + colls


def _mappables(ax) -> list:
    out = [im for im in ax.images if im.get_visible() and np.ndim(im.get_array()) == 2]
    out += [c for c in ax.collections if c.get_visible() and isinstance(c, QuadMesh)]
    out += [c for c in ax.collections if isinstance(c, PathCollection) and c.get_array() is not None]
    return out


def _has_data(ax) -> bool:
    return bool(_series(ax) or _mappables(ax) or ax.patches or ax.containers)


def _named(artist) -> str | None:
    label = artist.get_label()
    return label if label and not label.startswith("_") else None


def _style_key(artist):
    try:
        return (matplotlib.colors.to_hex(artist.get_color()), artist.get_linestyle(), str(artist.get_marker()))
    except (AttributeError, ValueError):
        return None


def _legend_texts(ax, fig) -> set[str]:
    texts = set()
    for leg in [ax.get_legend(), *fig.legends]:
        if leg is not None:
            texts |= {t.get_text() for t in leg.get_texts()}
    return texts


def _covered_points(ax, legend) -> int:
    """How many data points of ``ax`` lie inside ``legend``'s box (display coordinates); a line
    is sampled between its points too (a sparse curve still crosses the box)."""
    renderer = ax.figure.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    n = 0
    for s in _series(ax):
        if isinstance(s, Line2D):
            xy = np.asarray(s.get_xydata(), float)
        elif isinstance(s, PathCollection):
            xy = np.asarray(s.get_offsets(), float)
        else:
            continue
        xy = xy[np.isfinite(xy).all(axis=1)] if xy.ndim == 2 else np.empty((0, 2))
        d = ax.transData.transform(xy) if len(xy) else xy
        if isinstance(s, Line2D) and s.get_linestyle() not in ("None", "none", "", " ") and 1 < len(d) < 5000:
            t = np.linspace(0, 1, 9)[:-1]
            d = (d[:-1, None, :] * (1 - t)[None, :, None] + d[1:, None, :] * t[None, :, None]).reshape(-1, 2)
        n += int(np.sum((d[:, 0] > box.x0) & (d[:, 0] < box.x1) & (d[:, 1] > box.y0) & (d[:, 1] < box.y1)))
    return n


def _opaque_bbox(text) -> tuple | None:
    """The face colour of ``text``'s box when the box hides what is behind it (alpha >= 0.95)."""
    patch = text.get_bbox_patch()
    if patch is None or not patch.get_visible() or patch.get_fill() is False:
        return None
    rgba = matplotlib.colors.to_rgba(patch.get_facecolor(), patch.get_alpha())
    return rgba if rgba[3] >= 0.95 else None


def _cell_colour(im, x: float, y: float):
    """The RGBA colour of image ``im`` at data point ``(x, y)`` (None outside it or on a blank cell)."""
    arr = im.get_array()
    if arr is None or np.ndim(arr) != 2:
        return None
    left, right, bottom, top = im.get_extent()
    ny, nx = arr.shape
    # row 0 sits at the extent's first y edge (origin "lower": bottom; "upper": top)
    y0, y1 = (bottom, top) if im.origin == "lower" else (top, bottom)
    col = int(np.floor((x - left) / (right - left) * nx))
    row = int(np.floor((y - y0) / (y1 - y0) * ny))
    if not (0 <= col < nx and 0 <= row < ny) or np.ma.is_masked(arr[row, col]) or not np.isfinite(arr[row, col]):
        return None
    return im.to_rgba(arr[row, col])


def _text_problems(ax, name: str, renderer) -> list[str]:
    """Text drawn on an image: legible against its cell, not crossed by a hatched patch."""
    problems = []
    texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip() and t.get_transform() == ax.transData]
    images = [im for im in ax.images if im.get_visible()]
    hatched = [p for p in ax.patches if p.get_visible() and p.get_hatch()]
    low, crossed = [], []
    for t in texts:
        box = _opaque_bbox(t)
        extent = t.get_window_extent(renderer)
        if any(extent.overlaps(p.get_window_extent(renderer)) and (box is None or p.get_zorder() > t.get_zorder())
               for p in hatched):
            crossed.append(t.get_text())
        if box is not None:
            back = box
        else:
            cells = [c for c in (_cell_colour(im, *t.get_position()) for im in images) if c is not None]
            if not cells:
                continue
            back = cells[-1]
            bbox = t.get_bbox_patch()
            if bbox is not None and bbox.get_visible():  # a translucent box: its colour over the cell
                a = matplotlib.colors.to_rgba(bbox.get_facecolor(), bbox.get_alpha())
                back = tuple(a[3] * np.asarray(a[:3]) + (1 - a[3]) * np.asarray(back[:3]))
        c = contrast(t.get_color(), back[:3])
        if c < MIN_CONTRAST:
            low.append(f"{t.get_text()!r} ({c:.1f})")
    if low:
        problems.append(f"{name}: text with contrast below {MIN_CONTRAST} against its cell: " + ", ".join(low[:4])
                        + (f" and {len(low) - 4} more" if len(low) > 4 else ""))
    if crossed:
        problems.append(f"{name}: hatching crosses {len(crossed)} text(s) (e.g. {crossed[0]!r}); give the text an "
                        "opaque box")
    return problems


def _overlapping(labels, renderer) -> bool:
    """Whether two shown tick labels of one axis overlap (their boxes, in display coordinates)."""
    boxes = [t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()]
    return any(a.overlaps(b) and min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1
               for i, a in enumerate(boxes) for b in boxes[i + 1:])


def _empty_slots(main) -> list[str]:
    """Grid cells left empty where :func:`grid_columns` would leave fewer."""
    problems = []
    specs: dict[int, tuple] = {}
    for ax in main:
        ss = ax.get_subplotspec() if hasattr(ax, "get_subplotspec") else None
        if ss is None:
            continue
        gs = ss.get_gridspec()
        cells = {(r, c) for r in ss.rowspan for c in ss.colspan}
        g, used, n = specs.get(id(gs), (gs, set(), 0))
        specs[id(gs)] = (g, used | cells, n + 1)
    for gs, used, n in specs.values():
        nrows, ncols = gs.get_geometry()
        empty = nrows * ncols - len(used)
        if len(used) != n or ncols > MAX_PER_ROW:  # panels spanning cells, or caught by the row rule
            continue
        c = grid_columns(n)
        best = _math.ceil(n / c) * c - n
        if empty > best:
            problems.append(f"{empty} empty panel slot(s) in a {nrows} x {ncols} grid of {n} panels "
                            f"(use {_math.ceil(n / c)} x {c}: figures.style.panels)")
    return problems


def _words_problem(where: str, text: str) -> str | None:
    """A label that is only a symbol (no word of three letters outside ``$...$``)."""
    if text and not re.search(r"[A-Za-z]{3,}", _outside_math(text)):
        return f"{where}: {text!r} is a bare symbol; say what it is in words (and its unit)"
    return None


def _tex_problems(where: str, text: str) -> list[str]:
    out = []
    if text.count("$") % 2:
        out.append(f"{where}: unbalanced $ in {text!r}")
    elif re.search(r"\\[A-Za-z]+", _outside_math(text)):
        out.append(f"{where}: LaTeX outside $...$ in {text!r} (it prints as raw text)")
    if re.search(r"(?<![\d.])\d+\.0(?![\d.])", _outside_math(text)):
        out.append(f"{where}: an integer written as a float in {text!r}")
    return out


def _colourbar_problems(fig, main, renderer, texts: list) -> list[str]:
    """Each colourbar: a label in words, a perceptual colour map, a scale wider than 2% of its
    values, drawn over no other panel; its label joins ``texts`` (the name and TeX checks)."""
    problems = []
    for cax in [ax for ax in fig.axes if _is_colorbar(ax) and hasattr(ax, "_colorbar")]:
        cb = cax._colorbar
        label = cax.get_ylabel() if cb.orientation == "vertical" else cax.get_xlabel()
        where = f"colourbar {label!r}"
        texts.append((where, label))
        if not label:
            problems.append("a colourbar without a label")
        bare = _words_problem(where, label)
        if bare:
            problems.append(bare)
        cmap = getattr(cb.mappable, "cmap", None)
        if cmap is not None and cmap.name.removesuffix("_r") in _RAINBOW:
            problems.append(f"{where}: rainbow colour map {cmap.name!r} (use a perceptual one: viridis, cividis)")
        lo, hi = float(cb.norm.vmin), float(cb.norm.vmax)
        if np.isfinite(lo) and np.isfinite(hi) and abs(hi - lo) < 0.02 * max(abs(lo), abs(hi)):
            problems.append(f"{where}: the colour scale spans {lo:.4g} to {hi:.4g}, under 2% of its values (show "
                            "the range that matters, e.g. the criterion's window)")
        box = cax.get_tightbbox(renderer)
        for ax in main:
            if ax is getattr(cb.mappable, "axes", None):
                continue
            other = ax.get_tightbbox(renderer)
            if box is not None and other is not None and box.overlaps(other):
                ov = min(box.x1, other.x1) - max(box.x0, other.x0), min(box.y1, other.y1) - max(box.y0, other.y0)
                if min(ov) > 2:
                    problems.append(f"{where}: drawn over another panel or its labels (use constrained layout)")
                    break
    return problems


def lint(fig) -> list[str]:
    """The problems of ``fig``, one line each (empty when it passes); see the module docstring.
    Reads the matplotlib objects (labels, legends, colourbars, positions), never the pixels."""
    problems: list[str] = []
    fig.canvas.draw()  # legend positions ("best") and layout are settled by a draw
    renderer = fig.canvas.get_renderer()
    main = [ax for ax in fig.axes if ax.get_visible() and not _is_colorbar(ax)]
    sup = {k: getattr(fig, f"_sup{k}label", None) for k in ("x", "y")}
    sup = {k: bool(v is not None and v.get_text()) for k, v in sup.items()}
    cbar_norms = [ax._colorbar.mappable.norm for ax in fig.axes if _is_colorbar(ax) and hasattr(ax, "_colorbar")]
    coded = any(getattr(ax._colorbar.mappable, "axes", None) is None
                for ax in fig.axes if _is_colorbar(ax) and hasattr(ax, "_colorbar"))
    texts = [("suptitle", fig._suptitle.get_text() if fig._suptitle is not None else "")]
    for i, ax in enumerate(main, 1):
        name = f"panel {i}" + (f" ({ax.get_title()!r})" if ax.get_title() else "")
        texts += [(f"{name} title", ax.get_title()), (f"{name} x label", ax.get_xlabel()),
                  (f"{name} y label", ax.get_ylabel())]
        if not _has_data(ax):
            continue
        for k in ("x", "y"):
            shared = getattr(ax, f"get_shared_{k}_axes")().get_siblings(ax)
            if not getattr(ax, f"get_{k}label")() and not sup[k] and not any(
                    getattr(o, f"get_{k}label")() for o in shared if o is not ax):
                problems.append(f"{name}: no {k} label")
            bare = _words_problem(f"{name} {k} label", getattr(ax, f"get_{k}label")())
            if bare:
                problems.append(bare)
            ticks = getattr(ax, f"get_{k}ticklabels")(which="both")  # a log axis within a decade: minor ones
            if ax.axison and not any(t.get_visible() and t.get_text() for t in ticks):
                problems.append(f"{name}: no tick numbers on the {k} axis")
            if ax.axison and _overlapping(ticks, renderer):
                problems.append(f"{name}: tick labels overlap on the {k} axis (e.g. a log axis' minor labels)")
        problems += _text_problems(ax, name, renderer)
        for m in _mappables(ax):
            if getattr(m, "colorbar", None) is None and not any(m.norm is n for n in cbar_norms):
                problems.append(f"{name}: {type(m).__name__} without a colourbar")
        series = _series(ax)
        named = [s for s in series if _named(s)]
        legend = _legend_texts(ax, fig)
        if len(series) > 1:
            if not named:
                problems.append(f"{name}: {len(series)} curves and none named in a legend")
            missing = sorted({_named(s) for s in named} - legend)
            if missing:
                problems.append(f"{name}: legend does not name {missing}")
            # colour named by a colourbar (curves coloured from a colour map): the legend names the style
            key = (lambda a: (_style_key(a) or (None,))[1:]) if coded else _style_key
            styles = {key(s) for s in named}
            fills = {matplotlib.colors.to_hex(c.get_facecolor()[0]) for c in named  # a band's edges
                     if isinstance(c, PolyCollection) and len(c.get_facecolor())}
            anon = [s for s in series if isinstance(s, Line2D) and not _named(s) and key(s) not in styles
                    and matplotlib.colors.to_hex(s.get_color()) not in fills]
            if named and anon:
                problems.append(f"{name}: {len(anon)} curve(s) drawn in a style no legend entry names")
            alike: dict = {}
            for s in named:
                if isinstance(s, Line2D):
                    alike.setdefault(_style_key(s), set()).add(_named(s))
            same = [sorted(v) for v in alike.values() if len(v) > 1]
            if same:
                problems.append(f"{name}: legend entries drawn alike (same colour, line and marker): {same[0][:3]}")
        leg = ax.get_legend()
        if leg is not None and leg.get_visible():
            texts += [(f"{name} legend", t.get_text()) for t in leg.get_texts()]
            covered = _covered_points(ax, leg)
            if covered:
                problems.append(f"{name}: the legend covers {covered} data point(s)")
    for leg in fig.legends:
        texts += [("figure legend", t.get_text()) for t in leg.get_texts()]
    if fig.legends:  # one figure legend shows one handle per label: every curve with that label must look like it
        looks: dict[str, set] = {}
        for ax in main:
            for s in _series(ax):
                if isinstance(s, Line2D) and _named(s):
                    looks.setdefault(_named(s), set()).add(_style_key(s))
        mixed = sorted(k for k, v in looks.items() if len(v) > 1)
        if mixed:
            problems.append(f"the figure legend names differently drawn curves with one entry: {mixed[:3]}")
    problems += _colourbar_problems(fig, main, renderer, texts)
    for where, text in texts:
        hits = _INTERNAL.findall(_outside_math(text))
        if hits:
            problems.append(f"{where}: internal name(s) {hits} in {text!r}")
        problems += _tex_problems(where, text)
    problems += _empty_slots(main)
    rows: dict[float, int] = {}
    for ax in main:
        y0 = round(ax.get_position().y0, 2)
        rows[y0] = rows.get(y0, 0) + 1
    if rows and max(rows.values()) > MAX_PER_ROW:
        problems.append(f"{max(rows.values())} panels in a row (at most {MAX_PER_ROW}; use figures.style.panels)")
    return problems
