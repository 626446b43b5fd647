"""Scan & Snap empirical: the count-vector path equals the sequence path (per sample, exactly; and
in distribution over seeds), the sampler, the optimisers, the exact invariants of training."""

import math

import numpy as np
import pytest
import torch

from empirical import scan_snap as es
from theory import scan_snap as ss
from theory.errors import ConfigError


def _model(task, R=1, zero=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return es.DirectYZ(task, R, zero, g), es.Sampler(task, "cpu", g)


@pytest.mark.parametrize("layout", [dict(), dict(num_last=2, num_next_per_last=2, T=1024)])
def test_per_sample_gradients_identical_given_the_same_counts(layout):
    task = ss.make_task(ss.Config(**layout))
    m, smp = _model(task, R=2)
    n, q, x = smp.sequences(2, 6)
    counts = es.counts_of(x, task.M_in)
    for b in range(6):  # per sample
        sl = (slice(None), slice(b, b + 1))
        l_seq = es.cross_entropy(m(m.mixture_from_sequences(x[sl], q[sl])), smp.label[n[sl]]).sum()
        l_cnt = es.cross_entropy(m(m.mixture_from_counts(counts[sl], q[sl])), smp.label[n[sl]]).sum()
        g_seq = torch.autograd.grad(l_seq, [m.Y, m.Z])
        g_cnt = torch.autograd.grad(l_cnt, [m.Y, m.Z])
        assert abs(float((l_seq - l_cnt).detach())) < 1e-12
        for a, c in zip(g_seq, g_cnt):
            assert float((a - c).abs().max()) < 1e-13
            assert float(a.abs().max()) > 1e-6  # non-trivial gradients


def test_count_sampler_is_multinomial():
    cfg = ss.Config(T=200)
    task = ss.make_task(cfg)
    _, smp = _model(task)
    n, q, c = smp.counts(4, 4000)
    assert torch.all(c.sum(-1) == cfg.T - 1)
    P = torch.as_tensor(task.P)[n]
    assert torch.all(c[P == 0] == 0)
    # mean and variance of each count vs Multinomial(T-1, P): z-scores of the means
    for k in range(task.K):
        sel = c[n == k]
        p = torch.as_tensor(task.P[k])
        N = sel.shape[0]
        mean, var = (cfg.T - 1) * p, (cfg.T - 1) * p * (1 - p)
        on = p > 0
        z = (sel.mean(0) - mean)[on] / torch.sqrt(var[on] / N)
        assert float(z.abs().max()) < 4.5
        np.testing.assert_allclose(sel.var(0)[on].numpy(), var[on].numpy(), rtol=0.12)
    assert torch.all(q == torch.as_tensor(task.query)[n])


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


class _Rule:
    """The update rule (``empirical.scan_snap.update``) stepping torch Parameters, as the engines do."""

    def __init__(self, params: dict, lr: float, method: str, momentum: float):
        self.params, self.state = params, es.update.init(params, xp=torch)
        lrs = {k: torch.tensor([lr], dtype=torch.float64).view(-1, 1, 1) for k in params}
        self.hyper = {"lr": lrs, "method": method, "momentum": momentum}

    def step(self):
        self.state = es.update.step_torch(self.params, self.state, **self.hyper)


@pytest.mark.parametrize("method", ["sgd", "adam"])
def test_optimiser_matches_torch(method):
    torch.manual_seed(0)
    p1 = torch.nn.Parameter(torch.randn(1, 4, 5, dtype=torch.float64))
    p2 = torch.nn.Parameter(p1.detach().clone())
    ours = _Rule({"Y": p1}, 0.3, method, 0.9)
    ref = (torch.optim.SGD([p2], lr=0.3, momentum=0.9) if method == "sgd" else torch.optim.Adam([p2], lr=0.3))
    for _ in range(7):
        g = torch.randn_like(p1)
        p1.grad, p2.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    assert float((p1 - p2).abs().max()) < 1e-12


@pytest.mark.parametrize("method", ["sgd", "adam"])
def test_update_rule_is_pure_and_the_same_in_numpy_and_torch(method):
    """``update`` leaves its inputs alone and gives the same numbers with xp=numpy and xp=torch
    (per-run learning rates (R, 1, 1) broadcast over the parameters)."""
    rng = np.random.default_rng(5)
    params = {"Y": rng.normal(size=(3, 4, 5)), "Z": rng.normal(size=(3, 4, 4))}
    lr = {"Y": np.array([0.1, 0.2, 0.3])[:, None, None], "Z": np.array([1.0, 0.5, 0.25])[:, None, None]}
    tp = {k: torch.as_tensor(v) for k, v in params.items()}
    tlr = {k: torch.as_tensor(v) for k, v in lr.items()}
    sn, st = es.update.init(params), es.update.init(tp, xp=torch)
    for _ in range(4):
        grads = {k: rng.normal(size=v.shape) for k, v in params.items()}
        before = {k: v.copy() for k, v in params.items()}
        params, sn = es.update.update(grads, sn, params, lr=lr, method=method, momentum=0.8)
        tp, st = es.update.update({k: torch.as_tensor(v) for k, v in grads.items()}, st, tp, lr=tlr, method=method,
                                  momentum=0.8, xp=torch)
        assert not any(np.array_equal(before[k], params[k]) for k in params)  # a new value, the old one kept
    assert sn["step"] == st["step"] == 4
    for k in params:
        np.testing.assert_allclose(tp[k].numpy(), params[k], rtol=1e-14, atol=1e-15)


def test_count_engine_kernel_equals_the_update_rule():
    """The compiled count-vector engine's momentum kernel is the update rule (SGD on -grad J): three
    steps of the engine on its batches = three steps of ``update`` on the same batches' gradients."""
    from empirical.scan_snap.fast import CountSGD

    task = ss.make_task(ss.Config(num_last=2, num_next_per_last=2, T=64))
    lr_Y, lr_Z = np.array([1.0, 2.0]), np.array([0.5, 3.0])
    eng = CountSGD(task, lr_Y, lr_Z, batch=16, momentum=0.9, zero_init=False, rng=np.random.default_rng(2))
    params = {"Y": eng.Y.copy(), "Z": eng.Z.copy()}
    Z0, state = eng.Z.copy(), es.update.init(params)
    hyper = {"lr": {"Y": lr_Y[:, None, None], "Z": lr_Z[:, None, None]}, "method": "sgd", "momentum": 0.9}
    for _ in range(3):
        batch = eng.sample()
        gY, gZ = eng.gradient(batch)  # ascent gradient of J at the engine's current parameters
        params, state = es.update.update({"Y": -gY, "Z": -gZ}, state, params, **hyper)
        eng.step(batch)
        np.testing.assert_allclose(eng.Y, params["Y"], rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(eng.Z, params["Z"], rtol=1e-14, atol=1e-15)
    assert np.abs(eng.Z - Z0).max() > 1e-2  # the attention moved (a non-trivial check)


def test_training_invariants_sgd_and_not_adam():
    """Row sums of Y and Z stay at their initial values under SGD with momentum (spec §2.4); logits
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


def test_y_coordinates_logged_equal_the_parameters_group_means():
    """The logged Y coordinates are the group means of Y (exact on the symmetric subspace): embed a
    symmetric state, read it back."""
    cfg = ss.Config(num_unique_per_next=4, num_common=3)
    task = ss.make_task(cfg)
    sysm = ss.full_system(cfg)
    y = np.random.default_rng(3).normal(size=len(sysm.state))
    Y, _ = ss.embed_symmetric_state(task, y)
    got = ss.symmetric_y_coordinates(task, Y)
    for i, name in enumerate(sysm.state_names):
        if name.startswith("Y_"):
            assert math.isclose(float(got[name]), y[i], rel_tol=1e-14, abs_tol=1e-15), name


def test_variant_contradicting_the_config_and_adam_uses_momentum_as_beta1():
    from theory.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        es.run(ss.Config(variant="sequences", steps=2), device="cpu", variant="counts")
    assert e.value.field == "variant"
    # Adam's beta1 is the config's momentum (every setting reaches every variant)
    g = torch.Generator().manual_seed(0)
    p = torch.nn.Parameter(torch.randn(1, 3, 3, generator=g, dtype=torch.float64))
    q = torch.nn.Parameter(p.detach().clone())
    ours = _Rule({"p": p}, 0.1, "adam", 0.5)
    ref = torch.optim.Adam([q], lr=0.1, betas=(0.5, 0.999), eps=1e-8)
    for _ in range(4):
        gr = torch.randn(1, 3, 3, generator=g, dtype=torch.float64)
        p.grad, q.grad = gr.clone(), gr.clone()
        ours.step()
        ref.step()
    np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("layout, batch, scale, seed", [
    (dict(), 16, 1.0, 1),
    (dict(num_last=2, num_next_per_last=2, zero_init=False), 16, 1.0, 2),
    # 3 samples on 4 classes: empty classes; Y ~ 300: logits past exp overflow (the shifted softmax)
    (dict(num_last=2, num_next_per_last=2, zero_init=False), 3, 300.0, 3),
    (dict(T=256), 64, 5.0, 4),
])
def test_count_sgd_gradient_equals_torch_autograd(layout, batch, scale, seed):
    """The analytic count-vector gradient (compiled kernels, R = 3 runs, random batches, float64)
    = torch autograd of the model's CE."""
    from empirical.scan_snap.fast import CountSGD

    cfg = ss.Config(**{"T": 64, "batch": batch, **layout})
    task = ss.make_task(cfg)
    eng = CountSGD(task, [1.0, 2.0, 0.5], [0.5, 1.0, 3.0], batch=batch, momentum=0.9, zero_init=False,
                   rng=np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 100)
    eng.Y += scale * rng.normal(size=eng.Y.shape)  # a generic point
    eng.Z += rng.normal(size=eng.Z.shape)
    batch_ = eng.sample()
    gY, gZ = eng.gradient(batch_)
    n, sup_counts = batch_.per_sample()
    assert n.shape == (3, batch) and np.all(np.bincount(n[0], minlength=task.K) == batch_.m[0])
    m = es.DirectYZ(task, 3, True)
    with torch.no_grad():
        m.Y.copy_(torch.as_tensor(eng.Y))
        m.Z.copy_(torch.as_tensor(eng.Z))
    counts = np.zeros((3, batch, task.M_in))
    np.put_along_axis(counts, eng.sup[n], sup_counts, -1)
    nt = torch.as_tensor(n)
    loss = es.cross_entropy(m(m.mixture_from_counts(torch.as_tensor(counts), torch.as_tensor(task.query)[nt])),
                            torch.as_tensor(task.label)[nt]).sum()
    tY, tZ = torch.autograd.grad(loss, [m.Y, m.Z])
    np.testing.assert_allclose(gY, -tY.numpy(), atol=1e-13)
    np.testing.assert_allclose(gZ, -tZ.numpy(), atol=1e-13)
    assert counts.sum(-1).min() == counts.sum(-1).max() == cfg.T - 1


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
