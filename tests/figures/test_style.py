"""One figure style: the lint reads a figure's matplotlib objects and names what a
reviewer would reject (no label, a legend missing a curve or covering data, a heatmap without a
colourbar, internal names, too many panels in a row); a figure made with the helpers passes;
finish_figure writes PNG + PDF and records lint problems with the collector."""

import numpy as np
import pytest
import sympy as sp
import xarray as xr

from figures import style
from figures.core import FigureProblems, collecting, finish_figure, overlay
from theory import ReducedSystem

plt = style.plt
T = np.linspace(0.0, 1.0, 60)


def _good():
    fig, (ax,) = style.panels(1)
    ax.plot(T, T**2, **style.role("theory"), label="ODE (theory)")
    ax.plot(T, T**2 + 0.01, **style.role("practice"), label="trained")
    ax.set_xlabel(style.axis_label("time", "steps", "t"))
    ax.set_ylabel(style.axis_label("correlation", symbol=sp.Symbol("xi_1")))
    style.legend_outside(fig)
    return fig


def test_a_figure_made_with_the_helpers_passes():
    fig = _good()
    assert style.lint(fig) == []
    assert fig.axes[0].get_xlabel() == "time $t$ (steps)"
    assert fig.axes[0].get_ylabel() == r"correlation $\xi_{1}$"
    plt.close(fig)


@pytest.mark.parametrize("breakage, expected", [
    (lambda ax, fig: ax.set_ylabel(""), "no y label"),
    (lambda ax, fig: ax.set_xlabel(""), "no x label"),
    (lambda ax, fig: ax.plot(T, T, color="tab:green", ls="-."), "drawn in a style no legend entry names"),
    (lambda ax, fig: ax.plot(T, -T, label="lost"), "legend does not name ['lost']"),
    (lambda ax, fig: ax.set_title("fig_headline"), "internal name(s) ['fig_headline']"),
    (lambda ax, fig: ax.set_ylabel("z_dt_0"), "internal name(s) ['z_dt_0']"),
])
def test_a_broken_figure_fails_the_lint(breakage, expected):
    fig = _good()
    breakage(fig.axes[0], fig)
    problems = style.lint(fig)
    assert any(expected in p for p in problems), problems
    plt.close(fig)


def test_math_in_labels_is_not_an_internal_name():
    fig = _good()
    fig.axes[0].set_ylabel(r"$\eta_{V}\,\mathrm{d}t$ per step")
    assert style.lint(fig) == []
    plt.close(fig)


def test_legend_over_data_and_unlabelled_multi_curve_panels():
    fig, ax = plt.subplots()
    for k in range(3):
        ax.plot(T, k * T, label=f"slope {k}")
    ax.set_xlabel("time $t$")
    ax.set_ylabel("value $y$")
    ax.legend(loc="upper left")  # the curves start at the origin and rise to the right: free corner
    assert style.lint(fig) == []
    ax.legend(loc="lower right")  # where the curves are
    assert any("legend covers" in p for p in style.lint(fig))
    plt.close(fig)
    fig, ax = plt.subplots()
    ax.plot(T, T)
    ax.plot(T, 2 * T)
    ax.set_xlabel("time $t$")
    ax.set_ylabel("value $y$")
    assert any("2 curves and none named" in p for p in style.lint(fig))
    plt.close(fig)


def test_heatmaps_need_a_colourbar_and_get_integer_ticks():
    fig, ax = plt.subplots()
    ax.imshow(np.arange(12.0).reshape(3, 4))
    ax.set_xlabel("column $j$")
    ax.set_ylabel("row $i$")
    assert any("AxesImage without a colourbar" in p for p in style.lint(fig))
    plt.close(fig)
    fig, (ax,) = style.panels(1)
    style.heatmap(ax, np.arange(12.0).reshape(3, 4), xlabel="column $j$", ylabel="row $i$", cbar_label="value")
    assert style.lint(fig) == []
    fig.canvas.draw()
    ticks = ax.get_xticks()
    assert np.allclose(ticks, np.round(ticks))  # index axes: integer ticks only (no 0.5, 2.5)
    plt.close(fig)


def test_panels_are_at_most_three_per_row():
    fig, axes = plt.subplots(1, 4)
    for ax in axes:
        ax.plot(T, T)
        ax.set_xlabel("time $t$")
        ax.set_ylabel("value $y$")
    assert any("4 panels in a row" in p for p in style.lint(fig))
    plt.close(fig)
    # the fewest empty cells with at most three columns: 7 -> 4 x 2 (one empty), 4 -> 2 x 2, 5 -> 2 x 3
    for n, shape in ((7, (4, 2)), (4, (2, 2)), (5, (2, 3)), (3, (1, 3))):
        fig, axes = style.panels(n)
        rows = [round(ax.get_position().y0, 2) for ax in axes]
        cols = {round(ax.get_position().x0, 2) for ax in axes}
        assert len(axes) == n == len(fig.axes) and (len(set(rows)), len(cols)) == shape
        for ax in axes:
            ax.plot(T, T)
            ax.set_xlabel("time $t$")
            ax.set_ylabel("value $y$")
        assert style.lint(fig) == []
        plt.close(fig)
    fig, grid = plt.subplots(2, 3)  # 4 panels on a 2 x 3 grid: two empty slots where 2 x 2 has none
    for ax in grid.ravel()[4:]:
        fig.delaxes(ax)
    for ax in grid.ravel()[:4]:
        ax.plot(T, T)
        ax.set_xlabel("time $t$")
        ax.set_ylabel("value $y$")
    assert any("2 empty panel slot(s) in a 2 x 3 grid of 4 panels" in p for p in style.lint(fig))
    plt.close(fig)


def test_symbol_labels_come_from_the_derivation():
    x1, lam = sp.symbols("xi_1 lam", positive=True)
    s = ReducedSystem(name="t", paper="toy", state=(x1,), parameters=(lam,), rhs=(-lam * x1,),
                      observables={"square": x1**2, "long_name": sum(x1**k / k for k in range(1, 12))})
    labels = style.symbol_labels(s)
    assert labels["xi_1"] == r"$\xi_{1}$" and labels["lam"] == r"$\lambda$"
    assert labels["square"] == r"square $\xi_{1}^{2}$"
    assert labels["long_name"] == "long name"  # too long a formula: words
    from theory.export import to_latex

    assert r"\dot{\xi}_{1} &= - \lambda \xi_{1}" in to_latex(s)  # the same symbols as the equations


def test_overlay_band_visible_theory_apart_in_greyscale_and_lint_clean():
    rng = np.random.default_rng(0)
    theory = xr.Dataset({"xi_1": ("time", T**2)}, coords={"time": T})
    sde = xr.Dataset({"xi_1": (("path", "time"), T**2 + 0.05 * rng.standard_normal((30, T.size)))}, coords={"time": T})
    runs = xr.Dataset({"xi_1": (("run", "time"), T**2 + 0.05 * rng.standard_normal((8, T.size)))}, coords={"time": T})
    for ylabels in ({"xi_1": r"$\xi_{1}$"}, None):  # a symbol alone, or no label: the symbol with a word
        fig = overlay(theory, runs, ["xi_1"] * 4, sde=sde, ylabels=ylabels)
        assert fig.axes[0].get_ylabel() == r"value of $\xi_{1}$" and style.lint(fig) == []
        fig.axes[0].set_ylabel(r"$\xi_{1}$")
        assert any(r"'$\\xi_{1}$' is a bare symbol" in p for p in style.lint(fig))  # the symbol says nothing
        plt.close(fig)
    fig = overlay(theory, runs, ["xi_1"] * 4, sde=sde, ylabels={"xi_1": r"correlation $\xi_{1}$"})
    assert style.lint(fig) == []
    ax = fig.axes[0]
    band = next(c for c in ax.collections if c.get_label().startswith("SDE"))
    run_lines = [ln for ln in ax.get_lines() if ln.get_alpha() == style.run_alpha(8)]
    assert len(run_lines) == 8
    assert band.get_zorder() > max(ln.get_zorder() for ln in run_lines)  # the band is above the runs
    theory_line = next(ln for ln in ax.get_lines() if ln.get_label() == "ODE (theory)")
    # apart without colour: a different line style or width than every practice curve
    assert all((ln.get_linestyle(), ln.get_linewidth()) != (theory_line.get_linestyle(), theory_line.get_linewidth())
               for ln in run_lines)
    assert ax.get_ylabel() == r"correlation $\xi_{1}$"
    assert len({round(a.get_position().y0, 2) for a in fig.axes}) == 2  # 4 panels: two rows
    plt.close(fig)


def test_finish_figure_writes_png_and_pdf_and_records_problems(tmp_path):
    with collecting() as written:
        finish_figure(_good(), tmp_path, "good.png")
        bad = _good()
        bad.axes[0].set_ylabel("")
        finish_figure(bad, tmp_path, "bad.png")
        nodata = _good()
        nodata.axes[0].set_xlabel("")
        finish_figure(nodata, None, "unsaved.png")  # linted even when only the data is wanted
    assert [p.name for p in written] == ["good.png", "good.pdf", "bad.png", "bad.pdf"]
    assert (tmp_path / "good.pdf").read_bytes()[:5] == b"%PDF-"
    assert set(written.problems) == {"bad.png", "unsaved.png"}
    assert "no y label" in written.problems["bad.png"][0]
    with collecting(strict=True), pytest.raises(FigureProblems, match="bad2.png: panel 1: no y label"):
        bad = _good()
        bad.axes[0].set_ylabel("")
        finish_figure(bad, tmp_path, "bad2.png")
    assert not (tmp_path / "bad2.png").exists()


def _labelled(ax):
    ax.set_xlabel("time $t$")
    ax.set_ylabel("value $y$")


def test_contrast_is_the_wcag_ratio_and_text_colour_picks_the_larger():
    assert style.contrast("black", "white") == pytest.approx(21.0)
    assert style.contrast("#777777", "#777777") == pytest.approx(1.0)
    # WCAG's luminance of sRGB 0x77: ((0x77/255 + 0.055)/1.055)^2.4 = 0.1845; against white 1.05/0.2345
    assert style.contrast("#777777", "white") == pytest.approx(1.05 / 0.2345, rel=1e-3)
    for c in ("#440154", "#21918c", "#fde725", "#777777", "tab:red"):
        assert style.contrast(style.text_colour(c), c) >= 4.5


def test_text_on_cells_must_read_and_hatching_must_not_cross_it():
    data = np.array([[0.0, 1.0]])
    fig, (ax,) = style.panels(1)
    style.heatmap(ax, data, xlabel="column $j$", ylabel="row $i$", cbar_label="value", cmap="viridis")
    ax.text(0, 0, "0.00", color="black", ha="center", va="center")  # black on viridis' dark purple
    ax.text(1, 0, "1.00", color="black", ha="center", va="center")  # black on yellow: fine
    problems = style.lint(fig)
    assert any("contrast below 4.5" in p and "'0.00'" in p and "'1.00'" not in p for p in problems), problems
    ax.texts[0].set_color(style.text_colour(ax.images[0].to_rgba(0.0)))
    assert style.lint(fig) == []
    ax.add_patch(plt.Rectangle((-0.5, -0.5), 1, 1, fill=False, hatch="///", lw=0))
    assert any("hatching crosses 1 text(s)" in p for p in style.lint(fig))
    ax.texts[0].set_bbox({"fc": ax.images[0].to_rgba(0.0), "ec": "none"})  # an opaque box in the cell's colour
    ax.texts[0].set_zorder(5)
    assert style.lint(fig) == []
    plt.close(fig)


def test_colour_scales_need_a_perceptual_map_and_a_visible_range():
    fig, (ax,) = style.panels(1)
    style.heatmap(ax, np.arange(6.0).reshape(2, 3), xlabel="column $j$", ylabel="row $i$", cbar_label="value",
                  cmap="rainbow")
    assert any("rainbow colour map 'rainbow'" in p for p in style.lint(fig))
    plt.close(fig)
    fig, (ax,) = style.panels(1)
    style.heatmap(ax, 0.806 + 0.009 * np.arange(6.0).reshape(2, 3) / 5, xlabel="column $j$", ylabel="row $i$",
                  cbar_label="band coverage")
    assert any("the colour scale spans 0.806 to 0.815" in p for p in style.lint(fig))
    plt.close(fig)
    fig, (ax,) = style.panels(1)
    style.heatmap(ax, np.arange(6.0).reshape(2, 3), xlabel="column $j$", ylabel="row $i$",
                  cbar_label=r"$\mathrm{cov}_{80}$")
    assert any("is a bare symbol" in p and "colourbar" in p for p in style.lint(fig))
    plt.close(fig)


def test_a_colourbar_over_the_next_panel_is_refused():
    fig, axes = plt.subplots(1, 2, figsize=(5, 2.5))
    fig.subplots_adjust(wspace=0.02)  # no room between the panels: the colourbar's label lands on panel 2
    im = axes[0].imshow(np.arange(4.0).reshape(2, 2))
    for ax in axes:
        _labelled(ax)
    axes[1].plot(T, T)
    fig.colorbar(im, ax=axes[0], label="attention weight")
    assert any("drawn over another panel" in p for p in style.lint(fig))
    plt.close(fig)
    fig, axes = style.panels(2)
    im = axes[0].imshow(np.arange(4.0).reshape(2, 2))
    for ax in axes:
        _labelled(ax)
    axes[1].plot(T, T)
    fig.colorbar(im, ax=axes[0], label="attention weight")
    assert style.lint(fig) == []  # constrained layout makes room
    plt.close(fig)


def test_tick_numbers_text_and_legend_styles():
    fig, axes = plt.subplots(1, 2, sharey=True, layout="constrained")  # the right panel loses its tick numbers
    for ax in axes:
        ax.plot(T, T)
        _labelled(ax)
    assert any("panel 2: no tick numbers on the y axis" in p for p in style.lint(fig))
    plt.close(fig)
    fig, axes = style.panels(2, sharey=True)  # shared, with tick numbers kept on every panel
    for ax in axes:
        ax.plot(T, T)
        _labelled(ax)
    assert style.lint(fig) == []
    plt.close(fig)
    fig = _good()
    fig.axes[0].set_ylabel(r"samples to escape (\beta \geq 1/2)")
    fig.axes[0].set_title("SGD, batch 4.0")
    problems = style.lint(fig)
    assert any("LaTeX outside $...$" in p for p in problems) and any("integer written as a float" in p
                                                                     for p in problems), problems
    plt.close(fig)
    fig, (ax,) = style.panels(1)
    for l in range(8):  # eight components on a six-colour cycle: the seventh looks like the first
        ax.plot(T, (l + 1) * T, color=f"C{l}", label=f"component $l = {l + 1}$")
    _labelled(ax)
    style.legend_outside(fig)
    assert any("legend entries drawn alike" in p for p in style.lint(fig))
    plt.close(fig)


def test_curves_coloured_from_a_colourbar_are_named_by_their_style():
    """Ten components in ten colours of a sequential map with a colourbar naming them: the legend
    names the two line styles (theory dashed, trained with markers), not every colour."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import BoundaryNorm

    fig, (ax,) = style.panels(1)
    cmap = plt.get_cmap("viridis", 10)
    for l in range(10):
        ax.plot(T, (l + 1) * T, color=cmap(l), ls="--", label="ODE" if l == 0 else None)
        ax.plot(T, (l + 1) * T + 0.1, color=cmap(l), ls="-", marker="o", label="trained" if l == 0 else None)
    _labelled(ax)
    style.legend_outside(fig)
    assert any("drawn in a style no legend entry names" in p for p in style.lint(fig))  # colours unexplained
    fig.colorbar(ScalarMappable(BoundaryNorm(np.arange(0.5, 11), 10), cmap), ax=ax, label="component $l$")
    assert style.lint(fig) == []
    plt.close(fig)


def test_overlapping_tick_labels_are_refused():
    fig, (ax,) = style.panels(1, size=(3.0, 2.4))
    ax.semilogx([30, 40, 60, 100, 200, 400], np.arange(6.0))  # minor labels 3x10^1, 4x10^1 ... crowd each other
    ax.set_xticks([30, 32, 34], ["30.0000", "32.0000", "34.0000"])
    _labelled(ax)
    assert any("tick labels overlap on the x axis" in p for p in style.lint(fig))
    ax.set_xticks([30, 100, 400], ["30", "100", "400"])
    from matplotlib.ticker import NullFormatter

    ax.xaxis.set_minor_formatter(NullFormatter())
    assert style.lint(fig) == []
    plt.close(fig)


def test_one_legend_entry_must_not_stand_for_curves_drawn_differently():
    fig, axes = style.panels(2)
    axes[0].plot(T, T, color="C0", ls="-", label="the authors' script")
    axes[1].plot(T, 2 * T, color="C2", ls="--", label="the authors' script")  # the legend shows panel 1's look
    for ax in axes:
        _labelled(ax)
    style.legend_outside(fig)
    assert any("names differently drawn curves with one entry" in p for p in style.lint(fig))
    axes[1].get_lines()[0].set(color="C0", linestyle="-")
    assert style.lint(fig) == []
    plt.close(fig)
