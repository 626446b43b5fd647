"""empirical.seeds: batched draws equal each seed's own generator; stacked modules equal the
modules a per-seed run builds, and vmap over them equals a loop."""

import torch

from empirical.seeds import SeedBatch, stacked_modules


def test_seed_batch_rows_are_each_seeds_own_stream():
    seeds = [0, 5, 123]
    rng = SeedBatch(seeds)
    draws = [rng.rand(4, dtype=torch.float64), rng.randn(2, 3), rng.randint(0, 10, (6,)), rng.rand(3)]
    for i, s in enumerate(seeds):
        g = torch.Generator().manual_seed(s)  # what the Trainer hands seed s's experiment
        own = [torch.rand(4, generator=g, dtype=torch.float64), torch.randn(2, 3, generator=g),
               torch.randint(0, 10, (6,), generator=g), torch.rand(3, generator=g)]
        for batched, single in zip(draws, own):
            assert torch.equal(batched[i], single)
    state = rng.state()
    x = rng.rand(5)
    rng.set_state(state)
    assert torch.equal(rng.rand(5), x)


def test_stacked_modules_match_per_seed_builds_and_vmap_matches_a_loop():
    seeds = [1, 2, 3]
    build = lambda: torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))  # noqa: E731
    before = torch.get_rng_state()
    params, buffers, base = stacked_modules(seeds, build)
    assert torch.equal(torch.get_rng_state(), before)  # the global stream is left as it was
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(9))
    out = torch.func.vmap(lambda p, b: torch.func.functional_call(base, (p, b), (x,)))(params, buffers)
    for i, s in enumerate(seeds):
        torch.manual_seed(s)
        m = build()
        for name, p in m.named_parameters():
            assert torch.equal(params[name][i], p.detach())
        torch.testing.assert_close(out[i], m(x), rtol=0, atol=1e-6)
