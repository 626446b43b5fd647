"""empirical/scan_snap/fast.py: the count-vector engine's analytic gradient equals torch autograd,
float32 is float64 rounded, divergence is reported with its step, and layouts it does not implement
are refused."""

import dataclasses

import numpy as np
import pytest
import torch

from empirical import scan_snap as es
from empirical.scan_snap.fast import Batch, CountSGD
from theory import scan_snap as ss
from theory.errors import DivergenceError


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


def test_engine_reports_divergence_with_its_step():
    task = ss.make_task(ss.Config(T=32))
    eng = CountSGD(task, [1e6], [1e6], batch=8, momentum=0.9, zero_init=False, rng=np.random.default_rng(0))
    with pytest.raises(DivergenceError) as e:
        eng.run(200)
    assert 0 < e.value.step < 200 and e.value.step == eng.steps_done


def test_float32_engine_gradient_is_the_float64_one_rounded():
    """Quick Fig. 6 runs the engine in float32: on the same batch and parameters its gradient is the
    float64 gradient to float32 round-off."""
    task = ss.make_task(ss.Config(num_last=2, num_next_per_last=2, T=64))
    e64 = CountSGD(task, [1.0], [1.0], batch=32, momentum=0.9, zero_init=False, rng=np.random.default_rng(0))
    e32 = CountSGD(task, [1.0], [1.0], batch=32, momentum=0.9, zero_init=False, rng=np.random.default_rng(0),
                   dtype=np.float32)
    e64.Y += np.random.default_rng(1).normal(size=e64.Y.shape)
    e32.Y[...], e32.Z[...] = e64.Y, e64.Z
    batch = e64.sample()
    b32 = Batch(batch.m, batch.counts.astype(np.float32), batch.mask.astype(np.float32))
    g64, g32 = e64.gradient(batch), e32.gradient(b32)
    for a, b in zip(g64, g32):
        assert b.dtype == np.float32
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6 * np.abs(a).max())


def test_engine_refuses_a_layout_it_does_not_implement():
    import dataclasses

    task = ss.make_task(ss.Config())
    P = task.P.copy()
    P[1, task.dt[1]] = P[1, task.dt[1]][::-1]  # class 1's distinct-token profile reversed
    with pytest.raises(ValueError, match="one support distribution"):
        CountSGD(dataclasses.replace(task, P=P), [1.0], [1.0], batch=4, momentum=0.9, zero_init=True,
                 rng=np.random.default_rng(0))


def test_shuffled_labels_null_control():
    """``shuffle_labels`` (the claims' "shuffled data" null): the gradient with each slot labelled by
    its own class equals the generator's; with every label swapped (K = 2) the decoder gradient is
    the generator's with the two label columns swapped; the drawn labels are uniform over the K
    labels and independent of the context's class."""
    cfg = ss.Config(T=64, batch=32, extra_vocab=3)
    task = ss.make_task(cfg)
    eng = CountSGD(task, [1.0, 0.5], [0.5, 1.0], batch=32, momentum=0.0, zero_init=False,
                   rng=[np.random.default_rng(1), np.random.default_rng(2)])
    eng.Y += np.random.default_rng(3).normal(size=eng.Y.shape)
    b = eng.sample()
    own = np.ascontiguousarray(np.broadcast_to(task.label[None, :, None], b.mask.shape))
    g0 = eng.gradient(b)
    g1 = eng.gradient(dataclasses.replace(b, labels=own))
    np.testing.assert_array_equal(g0[0], g1[0]) and np.testing.assert_array_equal(g0[1], g1[1])
    swapped = eng.gradient(dataclasses.replace(b, labels=own[:, ::-1].copy()))
    # swapping the labels moves the +e_n term between the two label columns (alpha is unchanged):
    # the decoder gradient changes on the label columns only, and Z's gradient changes too
    d = swapped[0] - g0[0]
    other = np.setdiff1d(np.arange(task.M_out), task.label)
    np.testing.assert_allclose(d[..., other], 0.0, atol=1e-15)
    np.testing.assert_allclose(d[..., task.label[0]], -d[..., task.label[1]], atol=1e-15)  # moved, not made
    assert np.abs(d).max() > 1e-3 and not np.allclose(swapped[1], g0[1])
    sh = CountSGD(task, [1.0], [1.0], batch=32, momentum=0.0, zero_init=True, rng=[np.random.default_rng(4)],
                  shuffle_labels=True)
    labs, ks = [], []
    for _ in range(200):
        bb = sh.sample()
        real = bb.mask[0].astype(bool)
        labs.append(bb.labels[0][real])
        ks.append(np.broadcast_to(np.arange(task.K)[:, None], real.shape)[real])
    labs, ks = np.concatenate(labs), np.concatenate(ks)
    frac = np.mean(labs == task.label[0])
    assert abs(frac - 0.5) < 4 * 0.5 / np.sqrt(labs.size)
    agree = np.mean(labs == task.label[ks])  # label independent of the context's class: ~ 1/K
    assert abs(agree - 0.5) < 4 * 0.5 / np.sqrt(labs.size)
