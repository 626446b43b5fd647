"""SCB training runs (empirical/scb/experiment.py): time grid, variants, the proximal step, seeds and
resume, divergence, the softmax variant."""

import dataclasses

import numpy as np
import pytest
import torch

from empirical import scb as escb
from helpers.scb import set_up_experiment as _setup
from theory import scb
from theory.errors import ConfigError, DivergenceError


def test_trainer_logs_at_config_log_steps_and_problem_uses_ode_times():
    """log_every does not divide steps: the run logs 0, 7, ..., 42, 45 and the ODE uses those times."""
    cfg = scb.SCBConfig(N=3, T=8, Q=2, batch=32, steps=45, log_every=7)
    tr, _ = escb.train(cfg, device="cpu")
    np.testing.assert_array_equal(tr["step"].values, cfg.log_steps())
    np.testing.assert_array_equal(tr["time"].values, cfg.ode_times())
    assert cfg.log_steps()[-1] == 45
    np.testing.assert_array_equal(scb.problem(cfg).t, cfg.ode_times())
    np.testing.assert_array_equal(scb.minibatch_sde(cfg)[1], cfg.ode_times())


@pytest.mark.parametrize("variant, setting", [("sgd", "lam=0.1"), ("softmax", "lam=0.1"), ("sgd", "normalise=step"),
                                              ("preconditioned", "softmax_lr_power=1.0"), ("sgd", "softmax_lr_power=1")])
def test_setting_ignored_by_variant_is_a_config_error(variant, setting):
    with pytest.raises(ConfigError) as info:  # through the train slot's --variant ...
        escb.run(scb.SCBConfig().with_overrides([setting]), device="cpu", variant=variant)
    assert info.value.field == setting.split("=")[0]
    with pytest.raises(ConfigError) as info:  # ... and as the config's variant field
        scb.SCBConfig(variant=variant).with_overrides([setting])
    assert info.value.field == setting.split("=")[0]
    with pytest.raises(ConfigError, match="lam_switch"):
        scb.SCBConfig(lam_switch=1.0)  # without lam > 0 the switch does nothing


def test_cli_variant_is_the_config_variant(tmp_path):
    """`tdyn train scb --variant softmax --set softmax_lr_power=1`: the variant is set before the
    overrides (a softmax-only setting is accepted) and recorded in the trajectory's config; the
    paper row lists the config's variants."""
    import json

    from click.testing import CliRunner

    import simulate
    from figures.cli import main
    from figures.papers import get

    out = tmp_path / "a.nc"
    res = CliRunner().invoke(main, ["train", "scb", "--device", "cpu", "--no-progress", "--variant", "softmax",
                                    "--set", "softmax_lr_power=1", "--set", "T=8", "--set", "steps=4",
                                    "--set", "batch=16", "--out", str(out)])
    assert res.exit_code == 0, res.output
    traj = simulate.load(out)
    cfg = json.loads(traj.attrs["config"])
    assert cfg["variant"] == "softmax" and cfg["softmax_lr_power"] == 1.0 and traj.attrs["system"] == "softmax"
    assert get("scb").variants == tuple(scb.SCBConfig.VARIANTS)


def test_softmax_lr_power_reaches_the_softmax_update():
    """One softmax step moves the logits by eta_A * T**power * grad (power=1 vs the default 2)."""
    moves = {}
    for power in (2.0, 1.0):
        cfg = scb.SCBConfig(variant="softmax", N=3, T=8, Q=2, eta_A=0.01, batch=64, softmax_lr_power=power)
        exp = escb.SCBExperiment(cfg)
        exp.setup(torch.device("cpu"), torch.Generator().manual_seed(0))
        with torch.no_grad():  # off the saddle (at V = mu 1^T the logit gradient is exactly 0)
            exp.model.V.copy_(torch.as_tensor(exp.task.P))
        W0 = exp.model.A.detach().clone()
        exp.step(0)
        moves[power] = (exp.model.A.detach() - W0).abs().sum().item()
    assert np.isclose(moves[2.0] / moves[1.0], 8.0, rtol=1e-9)


def test_same_seed_same_numbers_and_resume(tmp_path, interrupt_at):
    cfg = scb.SCBConfig(N=3, T=8, Q=2, batch=64, steps=40, log_every=10)
    a, _ = escb.train(cfg, device="cpu", seed=5)
    b, _ = escb.train(cfg, device="cpu", seed=5)
    c, _ = escb.train(cfg, device="cpu", seed=6)
    assert np.array_equal(a.value_transition_correlation.values, b.value_transition_correlation.values)
    assert not np.array_equal(a.value_transition_correlation.values, c.value_transition_correlation.values)
    # interrupted at step 20 (checkpoint), resumed -> identical to the uninterrupted run
    ck = tmp_path / "ck.pt"
    interrupt_at(20)
    with pytest.raises(KeyboardInterrupt):
        escb.train(cfg, device="cpu", seed=5, checkpoint=ck, checkpoint_every=20)
    r, _ = escb.train(cfg, device="cpu", seed=5, checkpoint=ck, checkpoint_every=20, resume=True)
    assert np.array_equal(r.value_transition_correlation.values, a.value_transition_correlation.values)
    # the paper table's train slot (escb.run) passes checkpoint/resume through to the Trainer
    ck2 = tmp_path / "ck2.pt"
    cfg5 = dataclasses.replace(cfg, seed=5)
    interrupt_at(20)
    with pytest.raises(KeyboardInterrupt):
        escb.run(cfg5, device="cpu", checkpoint=ck2, checkpoint_every=20)
    assert ck2.exists()
    r2 = escb.run(cfg5, device="cpu", checkpoint=ck2, checkpoint_every=20, resume=True)
    assert np.array_equal(r2.value_transition_correlation.values, a.value_transition_correlation.values)


def test_divergence_raises_with_step_and_keeps_partial_trajectory():
    cfg = scb.SCBConfig(N=3, T=16, Q=2, eta_V=0.05, eta_A=5.0, batch=64, steps=2000, log_every=1)
    with pytest.raises(DivergenceError) as info:
        escb.train(cfg, device="cpu")
    err = info.value
    assert 1 <= err.step < 2000
    part = err.partial
    assert part.attrs["status"] == -1 and part.sizes["time"] >= 1
    assert np.all(np.isfinite(part.value_transition_correlation.values))


def test_proximal_step_is_preconditioned_gradient_then_soft_threshold():
    """One trainer step equals V - eta_V G_V D^-1, soft_threshold(A - eta_A G_A / mu, eta_A lam),
    recomputed in numpy from the same minibatch (docs/papers/scb.md §2 pseudo-code, Decision 5)."""
    cfg = scb.SCBConfig(N=3, T=8, Q=2, eta_V=0.2, eta_A=0.3, batch=256, lam=0.05, lam_switch=0.0)
    exp = _setup(cfg, seed=3)
    rng = np.random.default_rng(3)
    V0, A0 = exp.task.P + 0.1 * rng.normal(size=(3, 3)), exp.task.Qm + 0.02 * rng.normal(size=(8, 3))
    with torch.no_grad():
        exp.model.V.copy_(torch.as_tensor(V0))
        exp.model.A.copy_(torch.as_tensor(A0))
    state = exp.sampler.gen.get_state()
    x, k, y = exp.sampler.sample(cfg.batch)
    exp.sampler.gen.set_state(state)
    exp.step(0)
    X = np.eye(3)[x.numpy()]  # (B, T, N) dense only in the test
    Xa = np.einsum("btn,tb->bn", X, A0[:, k.numpy()])
    r = Xa @ V0.T - np.eye(3)[y.numpy()]
    gV = r.T @ Xa / cfg.batch
    gA = np.zeros_like(A0)
    for b in range(cfg.batch):
        gA[:, k[b]] += X[b] @ (V0.T @ r[b]) / cfg.batch
    mu = exp.task.mu
    V1 = V0 - cfg.eta_V * gV / mu[None, :]
    A1 = scb.soft_threshold(A0 - cfg.eta_A * gA / mu[None, :], cfg.eta_A * cfg.lam)
    assert np.allclose(exp.model.V.detach().numpy(), V1, atol=1e-12)
    assert np.allclose(exp.model.A.detach().numpy(), A1, atol=1e-12)
    assert (A1 == 0).sum() > 0  # the threshold bit


def test_softmax_variant_learns_the_same_attention_pattern():
    cfg = scb.SCBConfig(N=3, T=8, Q=2, eta_V=0.1, eta_A=0.1, batch=512, steps=800, log_every=100)
    task = scb.make_task(cfg)
    for variant in ("preconditioned", "softmax"):
        _, exp = escb.train(cfg.replace(variant=variant), device="cpu", task=task)
        A = exp.normalised_parameters()[1]
        for kk in range(3):
            top = set(np.argsort(A[:, kk])[-cfg.Q:])
            assert top == set(task.support[kk]), (variant, kk)
