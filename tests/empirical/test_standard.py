"""empirical/standard.py: one block is torch's TransformerEncoderLayer given the same weights (pre-
and post-LN, with and without a causal mask, float64), attention rows sum to 1, layer-0 scores
are the map's logits, and AdamW's warm-up follows its closed form."""

import pytest
import torch

from empirical.standard import StandardBlock, StandardTransformer, adamw_warmup
from theory.errors import ConfigError


def _copy_into_torch_layer(block: StandardBlock, layer: torch.nn.TransformerEncoderLayer) -> None:
    a = block.attn
    with torch.no_grad():
        layer.self_attn.in_proj_weight.copy_(torch.cat([a.q.weight, a.k.weight, a.v.weight]))
        layer.self_attn.in_proj_bias.copy_(torch.cat([a.q.bias, a.k.bias, a.v.bias]))
        layer.self_attn.out_proj.weight.copy_(a.out.weight)
        layer.self_attn.out_proj.bias.copy_(a.out.bias)
        for ours, theirs in ((block.fc1, layer.linear1), (block.fc2, layer.linear2), (block.ln1, layer.norm1),
                             (block.ln2, layer.norm2)):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_block_equals_torch_transformer_encoder_layer(norm_first, causal, activation):
    torch.manual_seed(3)
    d, H, T = 24, 3, 7
    block = StandardBlock(d, H, 40, norm_first=norm_first, activation=activation, causal=causal).double()
    with torch.no_grad():  # non-trivial LayerNorm and bias values
        for p in block.parameters():
            p.add_(0.3 * torch.randn_like(p))
    layer = torch.nn.TransformerEncoderLayer(d, H, 40, dropout=0.0, activation=activation, batch_first=True,
                                             norm_first=norm_first, dtype=torch.float64)
    _copy_into_torch_layer(block, layer)
    layer.train()  # the reference (non-fused) path; dropout is 0
    x = torch.randn(4, T, d, dtype=torch.float64)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64) if causal else None
    ours, att = block(x)
    ref = layer(x, src_mask=mask, is_causal=causal)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)
    assert att.shape == (4, H, T, T)
    torch.testing.assert_close(att.sum(-1), torch.ones(4, H, T, dtype=torch.float64), rtol=0, atol=1e-12)
    if causal:
        assert torch.all(att.triu(1) == 0)
    else:  # a bidirectional map attends to the future
        assert float(att.detach().triu(1).sum()) > 0.1


@pytest.mark.parametrize("norm_first", [True, False])
def test_model_maps_rows_and_layer0_scores(norm_first):
    g = torch.Generator().manual_seed(0)
    model = StandardTransformer(30, d=16, n_layer=2, n_head=2, max_len=12, vocab_out=9, norm_first=norm_first,
                                init_std=0.5, dtype=torch.float64, generator=g)
    idx = torch.randint(0, 30, (3, 10), generator=g)
    logits, maps = model(idx, return_attention=True)
    assert logits.shape == (3, 10, 9) and len(maps) == 2
    for a in maps:
        torch.testing.assert_close(a.sum(-1), torch.ones(3, 2, 10, dtype=torch.float64), rtol=0, atol=1e-12)
        assert torch.all(a.triu(1) == 0)
    # the map row of the last query is the softmax of layer0_scores over the keys' (token, position)
    T = idx.shape[1]
    for b in range(3):
        s = model.layer0_scores(idx[b, -1:], torch.tensor([T - 1]), idx[b], torch.arange(T))  # (1, H, T, T)
        own = s[0][:, torch.arange(T), torch.arange(T)]  # key t at its own position t: (H, T)
        torch.testing.assert_close(own.softmax(-1), maps[0][b, :, -1], rtol=0, atol=1e-12)
    # outputs at the last positions only: the same numbers
    last, last_maps = model(idx, return_attention=True, n_query=2)
    torch.testing.assert_close(last, logits[:, -2:], rtol=0, atol=1e-12)
    torch.testing.assert_close(last_maps[-1], maps[-1][:, :, -2:], rtol=0, atol=1e-12)
    torch.testing.assert_close(last_maps[0], maps[0], rtol=0, atol=0)
    # causality of the whole model
    idx2 = idx.clone()
    idx2[:, 6:] = (idx2[:, 6:] + 1) % 30
    torch.testing.assert_close(model(idx2)[:, :6], logits[:, :6], rtol=0, atol=1e-12)


def test_positions_and_bad_inputs():
    g = torch.Generator().manual_seed(1)
    idx = torch.tensor([[1, 1, 1, 1]])
    none = StandardTransformer(5, d=8, positions="none", causal=False, generator=g, dtype=torch.float64)
    learned = StandardTransformer(5, d=8, positions="learned", causal=False, generator=g, dtype=torch.float64)
    # without positions a sequence of one repeated token is the same vector everywhere
    assert torch.allclose(none(idx)[0, 0], none(idx)[0, 3], rtol=0, atol=1e-14)
    assert not torch.allclose(learned(idx)[0, 0], learned(idx)[0, 3], rtol=0, atol=1e-6)
    with pytest.raises(ConfigError, match="positions"):
        StandardTransformer(5, positions="rotary")
    with pytest.raises(ConfigError, match="n_head"):
        StandardTransformer(5, d=10, n_head=3)
    with pytest.raises(ConfigError, match="activation"):
        StandardBlock(8, 1, 8, activation="swish")


def test_adamw_warmup_first_steps_closed_form():
    """AdamW's first step from any gradient moves each entry by ``-lr_1 (sign(g) + wd p)`` (the
    bias-corrected m/sqrt(v) is g/|g|), with ``lr_1 = lr / warmup``; step s uses ``lr min(1, s/w)``."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    opt = adamw_warmup([p], lr=0.1, warmup=4, weight_decay=0.5, eps=0.0)
    rates = []
    for s in range(6):
        rates.append(opt.lr)
        opt.zero_grad()
        before = p.detach().clone()
        (p * torch.tensor([3.0, -1.0, 0.2], dtype=torch.float64)).sum().backward()
        opt.step()
        if s == 0:
            lr1 = 0.1 / 4
            expected = before * (1 - lr1 * 0.5) - lr1 * torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
            torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-15)
    assert rates == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1], rel=1e-15)
    with pytest.raises(ConfigError, match="warmup"):
        adamw_warmup([p], warmup=-1)
