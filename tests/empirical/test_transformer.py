"""empirical/transformer.py: the causal (and masked-LM) transformer, its attention maps against
torch's fused attention, attention entropy and stable rank."""

import math

import pytest
import torch
import torch.nn.functional as F

from empirical.transformer import TransformerLM, attention_entropy, stable_rank, uniform_causal_entropy


def test_uniform_causal_entropy_value_and_model_at_zero_attention():
    assert round(uniform_causal_entropy(35), 3) == 2.632
    assert uniform_causal_entropy(35) == pytest.approx(math.lgamma(36) / 35, rel=1e-12)  # mean ln i = ln(35!)/35
    torch.manual_seed(0)
    model = TransformerLM(50, d=16, d_hid=16, n_layer=2, dropout=0.0).eval()
    for b in model.blocks:  # q = k = 0 -> every allowed key gets the same score
        for lin in (b.attn.q, b.attn.k):
            torch.nn.init.zeros_(lin.weight), torch.nn.init.zeros_(lin.bias)
    with torch.no_grad():
        _, maps = model(torch.randint(0, 50, (3, 35)), return_attention=True)
    for a in maps:
        assert attention_entropy(a).item() == pytest.approx(uniform_causal_entropy(35), abs=1e-5)


def test_attention_maps_are_causal_rows_sum_to_one_and_match_torch_sdpa():
    torch.manual_seed(1)
    model = TransformerLM(40, d=24, d_hid=32, n_layer=2, n_head=2, dropout=0.0).eval()
    x = torch.randint(0, 40, (2, 12))
    logits, maps = model(x, return_attention=True)
    for a in maps:
        assert a.shape == (2, 2, 12, 12)
        torch.testing.assert_close(a.sum(-1), torch.ones(2, 2, 12))
        assert torch.all(a.triu(1) == 0)
    # the layer output equals torch's fused causal attention (an independent implementation)
    att = model.blocks[0].attn
    h = model.emb(x) * math.sqrt(24) + model.pe[:12]
    split = lambda t: t.view(2, 12, 2, 12).transpose(1, 2)  # noqa: E731
    ref = F.scaled_dot_product_attention(split(att.q(h)), split(att.k(h)), split(att.v(h)), is_causal=True)
    ours, _ = att(h)
    torch.testing.assert_close(ours, att.out(ref.transpose(1, 2).reshape(2, 12, 24)), rtol=1e-5, atol=1e-5)
    # causality of the whole model: changing future tokens leaves earlier logits unchanged
    x2 = x.clone()
    x2[:, 7:] = (x2[:, 7:] + 1) % 40
    torch.testing.assert_close(model(x2)[:, :7], logits[:, :7])
    # the bidirectional (masked-LM) model attends to the future
    enc = TransformerLM(40, d=24, d_hid=32, causal=False, tie=True, dropout=0.0).eval()
    assert enc.decoder.weight is enc.emb.weight
    assert float(enc(x, return_attention=True)[1][0].triu(1).sum()) > 0


def test_stable_rank_of_known_spectrum():
    U, _ = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    W = U[:, :3] @ torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))
    assert stable_rank(W) == pytest.approx(14 / 9, rel=1e-12)
