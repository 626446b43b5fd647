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
    ax = fig.axes[0]
    assert ax.get_ylabel() == r"value of $\xi_{1}$"  # no system names it: its symbol with a word
    assert fig.axes[1].get_ylabel() == r"value transition correlation $\zeta$"  # SCB's symbol
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
    theory = next(ln for ln in ax.get_lines() if ln.get_label() == "ODE (symmetric)")
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
