"""``tdyn plot FILE.nc [--vs OTHER.nc]``: every observable of a saved trajectory in the
shared style — SDE ensembles as bands, stacked runs as seed spreads, a theory-vs-practice overlay —
passing the figure lint; bad files are one error line."""

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

import simulate
from figures import style
from figures.cli import main
from figures.plot import plot_trajectories

T = np.linspace(0.0, 2.0, 41)


def _traj(source, dims=(), n=0, seed=0):
    """A trajectory in tdyn's layout: ``xi_1`` decays, a correlation rises (noisy over ``path``/``run``)."""
    rng = np.random.default_rng(seed)
    noise = 0.05 * rng.standard_normal((n, T.size)) if dims else 0.0
    data = {"xi_1": np.exp(-T) + noise, "value_transition_correlation": 1 - np.exp(-T) + noise}
    attrs = simulate.make_trajectory(T, {"xi_1": np.exp(-T)}, paper="scb", system="symmetric", source=source).attrs
    vdims = (dims[0], "time") if dims else ("time",)
    return xr.Dataset({k: (vdims, v) for k, v in data.items()}, coords={"time": T}, attrs=attrs)


def test_each_kind_drawn_as_itself_and_lint_clean():
    ode, sde, runs = _traj("ode"), _traj("sde", ("path",), 50), _traj("train", ("run",), 5, seed=1)
    fig = plot_trajectories(runs, [ode, sde])
    assert style.lint(fig) == []
    # the headline observable first, then the others
    assert fig.axes[0].get_ylabel() == r"value transition correlation $\zeta$"  # SCB's symbol
    ax = fig.axes[1]
    assert ax.get_ylabel() == r"value of $\xi_{1}$"  # no system names it: its symbol with a word
    bands = [c for c in ax.collections if "10-90% of 50 paths" in c.get_label()]
    assert len(bands) == 1
    # the band is the 10-90% order statistics of the paths (independent: numpy quantiles bracket it)
    verts = bands[0].get_paths()[0].vertices
    upper_at_end = verts[np.isclose(verts[:, 0], T[-1])][:, 1].max()
    q = np.quantile(sde["xi_1"].values[:, -1], [0.8, 0.95])
    assert q[0] <= upper_at_end <= q[1]
    seeds = [ln for ln in ax.get_lines() if ln.get_alpha() == style.ROLES["run"]["alpha"]]
    assert len(seeds) == 5
    mean = next(ln for ln in ax.get_lines() if "mean over seeds" in ln.get_label())
    np.testing.assert_allclose(mean.get_ydata(), runs["xi_1"].values.mean(0))
    theory = next(ln for ln in ax.get_lines() if ln.get_label() == "scb ODE (symmetric)")
    assert theory.get_zorder() > max(s.get_zorder() for s in seeds)
    style.plt.close(fig)


def test_cli_plot_writes_png_and_pdf(tmp_path):
    a, b = tmp_path / "train.nc", tmp_path / "ode.nc"
    simulate.save(_traj("train"), a)
    simulate.save(_traj("ode"), b)
    res = CliRunner().invoke(main, ["plot", str(a), "--vs", str(b)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "train.png").stat().st_size > 1000 and (tmp_path / "train.pdf").exists()
    res = CliRunner().invoke(main, ["plot", str(a), "--out", str(tmp_path / "x.png"), "--observables", "xi_1"])
    assert res.exit_code == 0 and (tmp_path / "x.png").exists()


@pytest.mark.parametrize("args, field", [
    (["missing.nc"], "file"),
    (["{a}", "--vs", "missing.nc"], "vs"),
    (["{a}", "--observables", "nope"], "observables"),
    (["{a}", "--out", "{d}/x.jpg"], "out"),
    (["{a}", "--out", "{d}/no/such/x.png"], "out"),
])
def test_cli_plot_bad_input_is_one_line(tmp_path, args, field):
    a = tmp_path / "t.nc"
    simulate.save(_traj("train"), a)
    res = CliRunner().invoke(main, ["plot", *[x.format(a=a, d=tmp_path) for x in args]])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:"), res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.nc"]


def _scb_like(source="sde", paths=8, seed=0):
    """An SCB three-query SDE file as `tdyn simulate scb --sde` writes it: 19 variables, among them
    the state ``zeta`` and the observable ``value_transition_correlation`` defined as it."""
    from simulate.trajectory import config_attrs
    from theory.scb import SCBConfig

    rng = np.random.default_rng(seed)
    names = ["zeta", "omega", "xi_1", "xi_2", "xi_3", "beta_1", "beta_2", "beta_3", "E_V", "E_v", "E_a_1", "E_a_2",
             "E_a_3", "value_mean_scale", "attention_target_overlap", "attention_sum", "attention_sq_norm",
             "population_loss"]
    ds = xr.Dataset({n: (("path", "time"), rng.standard_normal((paths, T.size)).cumsum(1)) for n in names},
                    coords={"time": T})
    ds["value_transition_correlation"] = ds["zeta"]
    attrs = simulate.make_trajectory(T, {"zeta": T}, paper="scb", system="minibatch_sgd_reduced", source=source).attrs
    ds.attrs.update(attrs)
    ds.attrs.update(config_attrs(SCBConfig(T=8, batch=4)))
    return ds


def test_default_plot_is_the_headline_observables_with_title_time_unit_and_symbols():
    ds = _scb_like()
    fig = plot_trajectories(ds)
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert len(fig.axes) == 6
    # the headline first; zeta is value_transition_correlation under another name: one panel
    assert labels[:3] == ["value transition correlation", "attention target overlap", "population loss"]
    assert not any(lb in (r"$\zeta$", "zeta") for lb in labels)
    assert labels[3:] == ["attention sq norm", "attention sum", r"value of $\beta_{1}$"]  # then natural order
    assert all(ax.get_xlabel() == "time $t$ (optimiser steps)" for ax in fig.axes)  # SCB: t = step
    assert fig.get_suptitle() == "scb: minibatch sgd reduced (SDE)"
    # the symmetric system's formula is not put on the three-query system's observable
    assert "+" not in labels[1]
    legend = fig.legends[0]
    assert all(t.get_text().startswith("scb SDE (minibatch sgd reduced)") for t in legend.get_texts())
    style.plt.close(fig)
    fig = plot_trajectories(ds, observables=["E_a_1", "xi_2"])
    assert [ax.get_ylabel() for ax in fig.axes] == [r"value of $E_{a,1}$", r"value of $\xi_{2}$"]  # not "E a 1"
    style.plt.close(fig)


def test_time_unit_follows_the_papers_ode_time():
    from figures.plot import time_unit
    from simulate.trajectory import config_attrs
    from theory.joma import JomaConfig

    ds = _traj("ode")
    assert time_unit(ds) is None  # no recorded config: no unit claimed
    cfg = JomaConfig(lr=0.25)
    ds.attrs.update(paper="joma", **config_attrs(cfg))
    assert time_unit(ds) == ("optimiser steps" if cfg.variant == "hier" else "1 = 4 optimiser steps")  # t = lr k


def test_vs_across_papers_is_refused_in_one_line(tmp_path):
    a, b = tmp_path / "scb.nc", tmp_path / "topic.nc"
    simulate.save(_traj("ode"), a)
    other = _traj("train")
    other.attrs["paper"] = "topic"
    simulate.save(other, b)
    res = CliRunner().invoke(main, ["plot", str(a), "--vs", str(b)])
    assert res.exit_code == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: vs: the files are of different papers (scb, topic)"), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scb.nc", "topic.nc"]


def test_summary_is_a_short_table_with_mean_and_band_for_an_sde():
    from figures.plot import summary

    ds = _scb_like(paths=40, seed=3)
    lines = summary(ds)
    assert "10-90% band over 40 paths" in lines[0] and "(optimiser steps)" in lines[0]
    rows = {ln.split()[0]: ln for ln in lines[1:-1]}
    assert list(rows) == ["value_transition_correlation", "attention_target_overlap", "population_loss",
                          "attention_sq_norm", "attention_sum", "beta_1"]
    for name, line in rows.items():
        mean, lo, hi = (float(x) for x in line.replace("[", " ").replace("]", " ").replace(",", " ").split()[1:])
        v = ds[name].values[:, -1]  # independent: numpy's mean and (linear) quantiles of the last time point
        assert mean == pytest.approx(v.mean(), rel=1e-5)
        assert (lo, hi) == pytest.approx(tuple(np.quantile(v, [0.1, 0.9])), rel=1e-5)
    assert lines[-1].startswith("  (13 more observables")


def test_summary_of_a_run_orders_names_naturally():
    from figures.plot import summary

    names = ["z_0_10", "z_0_2", "z_0_1"]
    ds = xr.Dataset({n: ("time", T * (i + 1)) for i, n in enumerate(names)}, coords={"time": T},
                    attrs={"paper": "none"})
    lines = summary(ds)
    assert [ln.split()[0] for ln in lines[1:]] == ["z_0_1", "z_0_2", "z_0_10"]
    assert [float(ln.split()[1]) for ln in lines[1:]] == [2.0 * 3, 2.0 * 2, 2.0 * 1]
    assert "final value at t = 2" in lines[0]


def test_simulate_ends_with_the_short_table(tmp_path):
    """``tdyn simulate --sde`` on the tiny paper (tests/tiny): a header, the table (mean and band
    over the paths, with the time unit), no wall of every variable."""
    from tiny import ROW

    from figures.papers import PAPERS, Paper, register

    register(Paper(**ROW))
    try:
        res = CliRunner().invoke(main, ["simulate", "tiny", "--sde", "--paths", "16", "--out", str(tmp_path / "s.nc")])
    finally:
        PAPERS.pop("tiny")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("tiny/") and "(sde)" in lines[0]
    assert "mean  10-90% band over 16 paths, at t = " in lines[1] and "(optimiser steps)" in lines[1]
    ds = simulate.load(tmp_path / "s.nc")
    a = ds["a"].values[:, -1]
    row = next(ln for ln in lines if ln.split()[0] == "a")
    assert float(row.split()[1]) == pytest.approx(a.mean(), rel=1e-5)
    assert lines[-1] == f"wrote {tmp_path / 's.nc'}" and len(lines) <= 2 + 6 + 2
