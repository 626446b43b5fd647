"""empirical/scan_snap/experiment.py: the two data paths train to the same law, the exact invariants
of training, time and logging, resume, the variant, the batched grids (torch and the count engine)
and the jax SGD map against the T = inf ODE."""

import math

import numpy as np
import pytest
import torch

from empirical import scan_snap as es
from figures.core import rel_l2
from figures.scan_snap.lines import theory_trajectory
from theory import scan_snap as ss
from theory.errors import ConfigError


def test_count_and_sequence_paths_same_loss_curve_distribution():
    """Six seeds per path (Fig. 4 setting, T = 128): the mean loss curves agree within their
    standard errors (|d|/se <= 3 at every logged step; the mean |d|/se <= 1.5)."""
    cfg = ss.Config(batch=64, T=128, steps=30, log_every=5, momentum=0.9, zero_init=False)
    curves = {}
    for path in ss.Config.VARIANTS:
        runs = [es.train(cfg.replace(variant=path), device="cpu", seed=s, log_z_rows=False)[0].population_loss.values
                for s in range(6)]
        curves[path] = np.array(runs)
    mc, ms = curves["counts"].mean(0), curves["sequences"].mean(0)
    se = np.sqrt(curves["counts"].var(0, ddof=1) / 6 + curves["sequences"].var(0, ddof=1) / 6)
    zs = np.abs(mc - ms)[1:] / se[1:]  # step 0: identical inits per seed
    assert zs.max() <= 3.0 and zs.mean() <= 1.5, zs
    assert mc[-1] < mc[0] - 0.3  # both actually learn


def test_training_invariants_sgd_and_not_adam():
    """Row sums of Y and Z stay at their initial values under SGD with momentum (docs/papers/scan_snap.md §2.4); logits
    outside the supports never move; Adam breaks the row sums."""
    for zero in (True, False):
        cfg = ss.Config(batch=32, steps=15, log_every=15, zero_init=zero, eta_Y=2.0, eta_Z=2.0)
        exp = es.ScanSnapExperiment(cfg)
        exp.setup(torch.device("cpu"), torch.Generator().manual_seed(3))
        Y0, Z0 = exp.parameters_numpy()
        for s in range(cfg.steps):
            exp.step(s)
        Y, Z = exp.parameters_numpy()
        np.testing.assert_allclose(Y.sum(1), Y0.sum(1), atol=1e-12)
        np.testing.assert_allclose(Z.sum(1), Z0.sum(1), atol=1e-12)
        task = exp.task
        moving = np.zeros_like(Z, dtype=bool)
        for n in range(task.K):
            moving[task.query[n], task.support(n)] = True
        assert np.array_equal(Z[~moving], Z0[~moving])
        assert np.abs(Z - Z0)[moving].max() > 1e-4
    cfg = ss.Config(batch=32, steps=5, optimizer="adam", eta_Y=0.1, eta_Z=0.1)
    exp = es.ScanSnapExperiment(cfg)
    exp.setup(torch.device("cpu"), torch.Generator().manual_seed(3))
    for s in range(cfg.steps):
        exp.step(s)
    Y, Z = exp.parameters_numpy()
    assert np.abs(Y.sum(1)).max() > 1e-4


def test_zero_init_loss_and_observable_names_match_theory():
    cfg = ss.Config(steps=2, log_every=1)
    traj, exp = es.train(cfg, device="cpu")
    assert math.isclose(float(traj.population_loss[0]), math.log(34), rel_tol=1e-12)
    sysm = ss.full_system(cfg)
    for name in list(sysm.observables) + ["z_dt_0", "z_c"]:
        assert name in traj
    # time alignment: momentum 0.9 -> t = step / 0.1
    assert math.isclose(float(traj.time[-1]), 20.0)


def test_grid_trend_entropy_falls_with_eta_Z():
    """Fig. 6 trend on a small grid (#last = 1, 60 steps, 3 seeds, default init)."""
    cfg = ss.Config(num_last=1, num_next_per_last=2, momentum=0.9, batch=128, T=128, steps=60, zero_init=False)
    res = es.train_grid(cfg, [0.5, 3.0], [1.0, 5.0], 3, device="cpu")
    ent = res["final"]["dt_entropy"]
    for r in (1.0, 5.0):
        lo = ent[(res["eta_Z"] == 0.5) & (res["ratio"] == r)].mean()
        hi = ent[(res["eta_Z"] == 3.0) & (res["ratio"] == r)].mean()
        assert hi < lo - 0.05, (r, lo, hi)


def test_run_resumes_from_checkpoint_bit_identical(tmp_path, interrupt_at):
    cfg = ss.Config(steps=20, log_every=5, batch=32)
    full = es.run(cfg, device="cpu")
    ck = tmp_path / "ck.pt"
    interrupt_at(10)
    with pytest.raises(KeyboardInterrupt):
        es.run(cfg, device="cpu", checkpoint=ck, checkpoint_every=10)
    resumed = es.run(cfg, device="cpu", checkpoint=ck, checkpoint_every=10, resume=True)
    np.testing.assert_array_equal(resumed["time"].values, cfg.ode_times())
    for name in ("z_dt_9", "Y_own_9", "population_loss"):
        np.testing.assert_array_equal(resumed[name].values, full[name].values)


def test_logged_at_config_log_steps_when_log_every_does_not_divide():
    cfg = ss.Config(steps=7, log_every=3, batch=16)
    traj = es.run(cfg, device="cpu")
    np.testing.assert_array_equal(traj["time"].values, cfg.ode_times())
    np.testing.assert_allclose(traj["time"].values, np.array([0, 3, 6, 7]) / (1 - 0.9))


def test_variant_contradicting_the_config():
    with pytest.raises(ConfigError) as e:
        es.run(ss.Config(variant="sequences", steps=2), device="cpu", variant="counts")
    assert e.value.field == "variant"
    # --variant sets the config's variant: the run is on that data path
    traj = es.run(ss.Config(steps=2, batch=8), device="cpu", variant="sequences")
    assert traj.attrs["system"] == "sequences"


def test_numpy_count_engine_grid_same_law_as_torch_grid():
    """Fig. 6 trend on the count-vector engine (``engine="numpy"``: CPU kernels, not torch): same
    setting as the torch grid test; both engines' final DT entropies agree within seed noise
    (different random streams)."""
    cfg = ss.Config(num_last=1, num_next_per_last=2, momentum=0.9, batch=128, T=128, steps=60, zero_init=False)
    a = es.train_grid(cfg, [0.5, 3.0], [1.0], 6, device="cpu", engine="numpy")
    b = es.train_grid(cfg, [0.5, 3.0], [1.0], 6, device="cpu")
    for ez in (0.5, 3.0):
        ea, eb = a["final"]["dt_entropy"][a["eta_Z"] == ez], b["final"]["dt_entropy"][b["eta_Z"] == ez]
        se = math.sqrt(ea.var(ddof=1) / ea.size + eb.var(ddof=1) / eb.size)
        assert abs(ea.mean() - eb.mean()) <= 3 * se + 1e-3, (ez, ea.mean(), eb.mean(), se)
    lo = a["final"]["dt_entropy"][a["eta_Z"] == 0.5].mean()
    hi = a["final"]["dt_entropy"][a["eta_Z"] == 3.0].mean()
    assert hi < lo - 0.05
    with pytest.raises(ConfigError):
        es.train_grid(cfg.replace(optimizer="adam"), [0.5], [1.0], 1, engine="numpy")


def test_sgd_ensemble_mean_follows_the_T_inf_ode_for_two_learning_rates():
    cfg = ss.Config(momentum=0.0, batch=256, T=4096, steps=40, log_every=5)
    lrs = [(1.0, 1.0), (2.0, 2.0)]
    times, Y, Z, lr = es.sgd_ensemble(cfg, lrs, 3)
    np.testing.assert_array_equal(times, cfg.ode_times())
    task = ss.make_task(cfg)
    assert Y.shape[:2] == (6, 9) and np.allclose(lr[:3], [1.0, 1.0]) and np.allclose(lr[3:], [2.0, 2.0])
    for i, (ey, ez) in enumerate(lrs):
        th = theory_trajectory(cfg.replace(eta_Y=ey, eta_Z=ez), times)
        y = np.stack([th[n].values for n in ss.full_system(cfg).state_names], -1)
        _, Zth = ss.embed_symmetric_state(task, y)
        zm = ss.z_rows(task, Z[3 * i: 3 * i + 3]).mean(0)
        assert rel_l2(zm, ss.z_rows(task, Zth)) <= 0.05
        # exact invariants hold path by path
        assert np.abs(Y[3 * i: 3 * i + 3].sum(-1)).max() < 1e-10
        assert np.abs(Z[3 * i: 3 * i + 3].sum(-1)).max() < 1e-10
