"""Scan & Snap simulation: finite-T SGD as a jax stochastic map on count vectors (vmapped over
seeds and learning rates) against the T = inf ODE, and its gradient against the torch model."""

import numpy as np
import torch

from empirical import scan_snap as es
from figures.scan_snap import compare as fs
from figures.core import rel_l2
from theory import scan_snap as ss


def test_jax_count_objective_gradient_equals_torch_model():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    task = ss.make_task(ss.Config(num_last=2, num_next_per_last=2))
    g = torch.Generator().manual_seed(0)
    m = es.DirectYZ(task, 1, False, g)
    n, q, c = es.Sampler(task, "cpu", g).counts(1, 32)
    loss = es.cross_entropy(m(m.mixture_from_counts(c, q)), torch.as_tensor(task.label)[n]).sum()
    gY, gZ = torch.autograd.grad(loss, [m.Y, m.Z])
    jY, jZ = jax.grad(ss.count_vector_objective, argnums=(0, 1))(
        jnp.asarray(m.Y.detach()[0].numpy()), jnp.asarray(m.Z.detach()[0].numpy()), jnp.asarray(c[0].numpy()),
        jnp.asarray(n[0].numpy()), jnp.asarray(task.query), jnp.asarray(task.label))
    np.testing.assert_allclose(np.asarray(jY), -gY[0].numpy(), atol=1e-14)  # ascent on J = descent on CE
    np.testing.assert_allclose(np.asarray(jZ), -gZ[0].numpy(), atol=1e-14)


def test_sgd_ensemble_mean_follows_the_T_inf_ode_for_two_learning_rates():
    cfg = ss.Config(momentum=0.0, batch=256, T=4096, steps=40, log_every=5)
    lrs = [(1.0, 1.0), (2.0, 2.0)]
    times, Y, Z, lr = es.sgd_ensemble(cfg, lrs, 3)
    np.testing.assert_array_equal(times, cfg.ode_times())
    task = ss.make_task(cfg)
    assert Y.shape[:2] == (6, 9) and np.allclose(lr[:3], [1.0, 1.0]) and np.allclose(lr[3:], [2.0, 2.0])
    for i, (ey, ez) in enumerate(lrs):
        th = fs.theory_trajectory(cfg.replace(eta_Y=ey, eta_Z=ez), times)
        y = np.stack([th[n].values for n in ss.full_system(cfg).state_names], -1)
        _, Zth = ss.embed_symmetric_state(task, y)
        zm = ss.z_rows(task, Z[3 * i: 3 * i + 3]).mean(0)
        assert rel_l2(zm, ss.z_rows(task, Zth)) <= 0.05
        # exact invariants hold path by path
        assert np.abs(Y[3 * i: 3 * i + 3].sum(-1)).max() < 1e-10
        assert np.abs(Z[3 * i: 3 * i + 3].sum(-1)).max() < 1e-10
