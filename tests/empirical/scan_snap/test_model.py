"""empirical/scan_snap/model.py: the count-vector path equals the sequence path per sample (exactly),
and the model's gradient equals jax.grad of the theory's count-vector objective."""

import numpy as np
import pytest
import torch

from empirical import scan_snap as es
from theory import scan_snap as ss


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
