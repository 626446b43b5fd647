"""The realism ladder of Scan & Snap (empirical/scan_snap/ladder.py, empirical/readouts.py): the
read-outs equal the theory's definitions on constructed cases, rung 1 is the paper's network (its
implied (Y, Z) run the reduced model exactly; W_V moves Y exactly as rung 0 when U is orthogonal and
frozen), rung 2's read-out is its attention map, and every rung trains and logs the observables."""

import math

import numpy as np
import pytest
import torch

from empirical import scan_snap as es
from empirical.readouts import attention_entropy, per_token_logit, token_attention, uniform_causal_entropy
from empirical.scan_snap import update
from empirical.scan_snap.ladder import (OBSERVABLES, PaperTransformer, RungSettings, _c_rung2, _lr,
                                        attention_observables, train_rung)
from empirical.standard import StandardTransformer
from theory import scan_snap as ss
from theory.errors import ConfigError

MEDIUM = dict(num_last=1, num_next_per_last=2)


# ------------------------------------------------------------------------------------------------
# read-outs on constructed cases
# ------------------------------------------------------------------------------------------------
def test_attention_entropy_uniform_causal_and_one_hot():
    T = 9
    uniform = torch.full((2, 3, T, T), 1.0 / T, dtype=torch.float64)
    assert attention_entropy(uniform).item() == pytest.approx(math.log(T), abs=1e-6)  # eps = 1e-8 inside the log
    causal = torch.tril(torch.ones(T, T, dtype=torch.float64))
    causal = causal / causal.sum(-1, keepdim=True)
    assert attention_entropy(causal).item() == pytest.approx(uniform_causal_entropy(T), abs=1e-6)
    one_hot = torch.eye(T, dtype=torch.float64)[torch.randperm(T)]
    assert attention_entropy(one_hot).item() == pytest.approx(0.0, abs=1e-7)


def test_token_attention_and_per_token_logit_constructed():
    att = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    ids = torch.tensor([[2, 0, 2, 1]])
    torch.testing.assert_close(token_attention(att, ids, 4), torch.tensor([[0.2, 0.4, 0.4, 0.0]], dtype=torch.float64))
    # a causal query's own weight left out: renormalised over the keys given
    torch.testing.assert_close(token_attention(att[:, :3], ids[:, :3], 3),
                               torch.tensor([[2 / 6, 0.0, 4 / 6]], dtype=torch.float64))
    s = torch.log(torch.tensor([[1.0, 2.0, 3.0, 6.0]], dtype=torch.float64))
    assert per_token_logit(s).item() == pytest.approx(math.log(3.0), rel=1e-15)
    assert per_token_logit(torch.full((5,), 0.7, dtype=torch.float64)).item() == pytest.approx(0.7, rel=1e-15)


def test_attention_observables_equal_the_theory_definitions():
    task = ss.make_task(ss.Config())  # Syn-Small
    zero = attention_observables(task, ss.attention_scores(task, np.zeros((task.M_in, task.M_in))))
    assert zero["dt_entropy"] == pytest.approx(2.151, abs=5e-4)  # spec §4 item 12: P renormalised on the DTs
    assert zero["ct_mass"] == pytest.approx(10 / 15.5, rel=1e-12)  # spec §1.4: common weight 1 of 15.5
    rng = np.random.default_rng(0)
    Y, Z = rng.normal(size=(3, task.M_in, task.M_out)), rng.normal(size=(3, task.M_in, task.M_in))
    ours = attention_observables(task, ss.attention_scores(task, Z))
    theirs = ss.observables_from_parameters(Y, Z, task)
    for k in ("dt_entropy", "support_entropy"):
        np.testing.assert_allclose(ours[k], theirs[k], rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# rung 1: the paper's network as stated
# ------------------------------------------------------------------------------------------------
def _paper(task, R=2, d=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    m = PaperTransformer(task, R, d, g)
    with torch.no_grad():
        m.WV.normal_(generator=g)
    return m, es.Sampler(task, "cpu", g)


def test_rung1_is_the_reduced_model_at_its_implied_parameters():
    task = ss.make_task(ss.Config(**MEDIUM, T=24))
    m, smp = _paper(task)
    n, q, x = smp.sequences(2, 5)
    ref = es.DirectYZ(task, 2)
    with torch.no_grad():
        ref.Y.copy_(m.Y)
        ref.Z.copy_(m.Z)
    mix_seq = m.mixture_from_sequences(x, q)  # explicit query/key vectors per position
    torch.testing.assert_close(mix_seq, ref.mixture_from_sequences(x, q), rtol=0, atol=1e-12)
    torch.testing.assert_close(m.mixture_from_counts(es.counts_of(x, task.M_in), q), mix_seq, rtol=0, atol=1e-12)
    torch.testing.assert_close(m(mix_seq), ref(mix_seq), rtol=0, atol=1e-12)  # u_k^T W_V U^T LN(X^T b) = Y^T LN(.)


def test_rung1_value_weights_move_Y_exactly_as_rung0_with_orthogonal_frozen_embeddings():
    """d = M and M_in = M_out: U is square orthogonal, U U^T = I, so dY = U dW_V^T U^T = -eta_Y G_Y."""
    cfg = ss.Config(**MEDIUM, T=24, extra_vocab=0)
    task = ss.make_task(cfg)
    assert task.M_in == task.M_out
    m, smp = _paper(task, R=1, d=task.M_out)
    ref = es.DirectYZ(task, 1)
    with torch.no_grad():
        ref.Y.copy_(m.Y)
        ref.Z.copy_(m.Z)
    n, q, counts = smp.counts(1, 16)
    for model in (m, ref):
        es.cross_entropy(model(model.mixture_from_counts(counts, q)), smp.label[n]).sum().backward()
    lr = _lr(cfg, 1, RungSettings(d=task.M_out, u_rate=0.0))
    params = {k: getattr(m, k) for k in lr}
    update.step_torch(params, update.init(params, xp=torch), lr=lr, method="sgd", momentum=0.0)
    with torch.no_grad():
        expected = ref.Y - cfg.eta_Y * ref.Y.grad
    torch.testing.assert_close(m.Y.detach(), expected, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# rung 2: the read-out is the attention map
# ------------------------------------------------------------------------------------------------
def test_rung2_class_attention_is_the_maps_token_mass_without_positions():
    """Without positional embeddings a first-layer score depends on the two tokens only, so the query's
    map row summed per token is exactly q o e^z / (q . e^z) with z the per-token logit of the read-out."""
    task = ss.make_task(ss.Config(**MEDIUM, T=40))
    g = torch.Generator().manual_seed(2)
    model = StandardTransformer(task.M_in, d=16, n_head=1, max_len=40, vocab_out=task.M_out, positions="none",
                                init_std=0.4, dtype=torch.float64, generator=g)
    smp = es.Sampler(task, "cpu", g)
    n, q, x = smp.sequences(1, 3)
    ids = torch.cat([x[0], q[0][:, None]], 1)
    _, maps = model(ids, return_attention=True)
    mass = token_attention(maps[0][:, 0, -1, :-1], x[0], task.M_in)
    c = _c_rung2(model, task, 40)  # (K, M_in) = normalize(P o e^z)
    z = np.log(c / np.where(task.P > 0, task.P, 1.0), where=task.P > 0, out=np.full_like(c, -np.inf))
    counts = es.counts_of(x[0], task.M_in).numpy()
    expected = ss.mixture(counts, z[n[0].numpy()])
    np.testing.assert_allclose(mass.detach().numpy(), expected, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# every rung trains and logs the observables
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rung", [0, 1, 2])
def test_each_rung_trains_and_logs_the_observables(rung):
    cfg = ss.Config(**MEDIUM, T=16, batch=32, steps=12, log_every=4, momentum=0.0)
    settings = RungSettings(d=36 if rung == 1 else 16, lr=1e-2, warmup=2, probe=16)
    ds = train_rung(cfg, rung, seeds=[0, 1], settings=settings)
    assert set(OBSERVABLES) <= set(ds.data_vars)
    assert ds["dt_entropy"].dims == ("seed", "time") and list(ds["time"].values) == [0, 4, 8, 12]
    # at the start attention is (near) uniform: the zero-init entropy of P on the DTs (spec §4 item 12)
    assert ds["dt_entropy"].values[:, 0] == pytest.approx([2.151] * 2, abs=5e-3)
    loss = ds["loss"].values
    assert np.all(loss[:, -1] < loss[:, 1] - 0.1)  # it learns: ln 33 = 3.50 at the first step
    again = train_rung(cfg, rung, seeds=[0, 1], settings=settings)
    np.testing.assert_array_equal(again["dt_entropy"].values, ds["dt_entropy"].values)  # same seeds, same numbers


def test_bad_settings():
    cfg = ss.Config(**MEDIUM)
    with pytest.raises(ConfigError, match="^d:|d: "):
        train_rung(cfg, 1, seeds=[0], settings=RungSettings(d=8))
    with pytest.raises(ConfigError, match="rung"):
        train_rung(cfg, 3, seeds=[0])
    with pytest.raises(ConfigError, match="seeds"):
        train_rung(cfg, 0, seeds=[])
