"""empirical/scan_snap/experiment.py:train_seeds — every seed of a setting in one call of the count
engine: the batched runs are the runs made one at a time; given the Trainer's own minibatches the
engine reproduces the Trainer's parameters (same init, same update, float64); the settings the
engine does not run (Adam) are the Trainer's runs stacked."""

import numpy as np
import pytest

from empirical import scan_snap as es
from empirical.scan_snap.experiment import logged_observables, train_seeds
from empirical.scan_snap.fast import Batch, CountSGD
from empirical.trainer import Trainer
from theory import scan_snap as ss


@pytest.mark.parametrize("layout", [dict(zero_init=True, momentum=0.0, T=4096),
                                    dict(zero_init=False, momentum=0.9, T=64, num_next_per_last=2)])
def test_batched_seeds_are_the_runs_made_one_at_a_time(layout):
    cfg = ss.Config(batch=16, steps=40, log_every=8, eta_Y=2.0, eta_Z=1.0, **layout)
    batched = train_seeds(cfg, seeds=[3, 0, 7])
    assert batched["z_c"].dims == ("seed", "time") and list(batched["seed"].values) == [3, 0, 7]
    np.testing.assert_allclose(batched["time"].values, cfg.ode_times())
    for s in (0, 7):
        one = train_seeds(cfg, seeds=[s])
        for v in batched.data_vars:
            np.testing.assert_allclose(batched[v].sel(seed=s).values, one[v].isel(seed=0).values, rtol=0, atol=1e-12)
    assert np.abs(batched["z_c"].sel(seed=3).values - batched["z_c"].sel(seed=0).values).max() > 0  # own data
    light = train_seeds(cfg, seeds=[3, 0, 7], attention_only=True)
    assert set(light.data_vars) == {"dt_entropy", "z_c", *[f"z_dt_{j}" for j in range(10)]}
    for v in light.data_vars:
        np.testing.assert_allclose(light[v].values, batched[v].values, rtol=0, atol=1e-12)


class _Recording(es.ScanSnapExperiment):
    """The Trainer's experiment, recording every minibatch it draws (classes, support counts)."""

    def setup(self, device, generator):
        super().setup(device, generator)
        self.Y0, self.Z0 = (p.detach().clone() for p in (self.model.Y, self.model.Z))
        self.batches, draw = [], self.sampler.support_counts

        def recorded(R, B):
            out = draw(R, B)
            self.batches.append((out[0][0].numpy().copy(), out[3][0].numpy().copy()))
            return out

        self.sampler.support_counts = recorded


def _slots(task, draws):
    """Per-seed minibatches (classes (B,), support counts (B, S)) -> the engine's class-slot Batch."""
    K, S = task.K, draws[0][1].shape[1]
    per = [[c[n == k] for k in range(K)] for n, c in draws]
    P = max(len(x) for run in per for x in run)
    counts = np.ones((len(draws), K, P, S))
    mask = np.zeros((len(draws), K, P))
    for r, run in enumerate(per):
        for k, rows in enumerate(run):
            counts[r, k, :len(rows)], mask[r, k, :len(rows)] = rows, 1.0
    return Batch(np.array([[len(x) for x in run] for run in per]), counts, mask)


@pytest.mark.parametrize("zero_init, momentum", [(True, 0.0), (False, 0.9)])
def test_engine_on_the_trainers_minibatches_reproduces_the_trainer(zero_init, momentum):
    """Per seed, the Trainer (torch, autograd) trains and records its minibatches; the count engine
    runs all seeds at once from the Trainer's initial parameters on those minibatches: the same
    parameters and logged observables at every step (float64, round-off)."""
    cfg = ss.Config(batch=12, T=64, steps=25, log_every=5, eta_Y=3.0, eta_Z=1.5, zero_init=zero_init,
                    momentum=momentum)
    seeds, exps, trajs = [0, 5], [], []
    for s in seeds:
        exp = _Recording(cfg)
        trajs.append(Trainer(device="cpu", seed=s).run(exp))
        exps.append(exp)
    task = ss.make_task(cfg)
    eng = CountSGD(task, [cfg.eta_Y] * 2, [cfg.eta_Z] * 2, batch=cfg.batch, momentum=momentum, zero_init=True,
                   rng=[np.random.default_rng(0), np.random.default_rng(1)])
    eng.Y[...] = np.stack([e.Y0[0].numpy() for e in exps])
    eng.Z[...] = np.stack([e.Z0[0].numpy() for e in exps])
    logs = set(cfg.log_steps().tolist())
    for step in range(cfg.steps):
        eng.step(_slots(task, [e.batches[step] for e in exps]))
        if step + 1 in logs:
            obs = logged_observables(task, eng.Y, eng.Z, z_rows=True)
            i = list(cfg.log_steps()).index(step + 1)
            for r, tr in enumerate(trajs):
                for v in ("z_c", "z_dt_9", "Y_own_9", "dt_entropy", "population_loss"):
                    assert obs[v][r] == pytest.approx(float(tr[v].values[i]), abs=1e-12), (v, step)
    for r, e in enumerate(exps):
        np.testing.assert_allclose(eng.Y[r], e.model.Y.detach()[0].numpy(), rtol=0, atol=1e-12)
        np.testing.assert_allclose(eng.Z[r], e.model.Z.detach()[0].numpy(), rtol=0, atol=1e-12)


def test_settings_the_engine_does_not_run_are_the_trainers_runs_stacked():
    cfg = ss.Config(batch=8, T=32, steps=6, log_every=3, optimizer="adam", eta_Y=0.1, eta_Z=0.1, zero_init=False)
    batched = train_seeds(cfg, seeds=[1, 2])
    for i, s in enumerate([1, 2]):
        one, _ = es.train(cfg.replace(seed=s), device="cpu", log_z_rows=False)
        np.testing.assert_allclose(batched["z_c"].isel(seed=i).values, one["z_c"].values, rtol=0, atol=1e-14)
    assert "loss" not in batched  # the per-step batch loss is not a logged observable of train_seeds
