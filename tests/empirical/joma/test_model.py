"""empirical/joma/model.py: the real networks' autograd gradients, in reduced coordinates, are the
derived block flow (the fixed-g block for every attention and activation; the headline network with
G = onehot - softmax(h) on its bags of words), and the logged entropy is the network's own."""

import numpy as np
import pytest
import torch

from empirical import joma as E
from theory import joma as J


@pytest.mark.parametrize("attention", J.ATTENTIONS)
@pytest.mark.parametrize("activation", ["linear", "tanh"])
def test_network_gradient_is_the_derived_block_flow(attention, activation):
    """-grad of the fixed-g loss of the torch block, in reduced coordinates, equals the sympy rhs."""
    cfg = J.JomaConfig(attention=attention, activation=activation, Mc=3, K=2, N=2, d=5, init_scale=0.4,
                       gradient="random", temperature=0.8)
    exp = E.BlockExperiment(cfg)
    exp.setup(torch.device("cpu"), torch.Generator())
    exp.loss().backward()
    m = exp.model
    Mc = cfg.Mc
    gW = -m.W.grad.numpy()
    got = np.concatenate([-m.z.grad.numpy(), gW[:Mc].T.ravel(), gW[Mc]])
    sysm = J.block_system(attention, activation, 3, 2, 2)
    y = sysm.state_vector(J.block_initial_state(cfg))
    want = sysm.to_numpy()(0.0, y, sysm.parameter_vector(J.block_parameters(cfg)))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert np.all(gW[Mc + 1:] == 0)  # the null space of the embeddings never moves


def test_mixture_network_gradient_is_the_block_flow_and_entropy_is_its_own():
    """The headline network's -grad (CE, softmax over positions, tanh) at a random point equals the
    block flow with G = onehot - softmax(h) on its bags of words; its logged attention entropy equals
    the position-softmax entropy recomputed from z (docs/papers/joma.md §1.2)."""
    cfg = J.JomaConfig(variant="mixture", Mc=5, K=3, d=7, n_per_class=6, seq_len=5, init_scale=0.3)
    exp = E.MixtureExperiment(cfg)
    exp.setup(torch.device("cpu"), torch.Generator())
    h, _ = exp.logits()
    torch.nn.functional.cross_entropy(h, exp.lab).backward()
    m = exp.model
    gW = -m.W.grad.numpy()
    got = np.concatenate([-m.z.grad.numpy(), gW[:cfg.Mc].T.ravel(), gW[cfg.Mc]])
    z, V, s = m.reduced()
    Vd, sd, zd = J.block_flow("softmax", "tanh", exp.X, exp.gradient_rows(), V, s, z, cfg.temperature)
    np.testing.assert_allclose(got, np.concatenate([zd, Vd.ravel(), sd]), rtol=1e-11, atol=1e-13)
    m.zero_grad()
    obs = exp.observables()
    assert obs["attention_entropy"] == pytest.approx(float(J.position_attention_entropy(z, exp.tokens, 1.0)), rel=1e-12)
