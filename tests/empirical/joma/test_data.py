"""empirical/joma/data.py: the HBLT sampler against Theorem 5's co-occurrence, the Table-1
hierarchy's structure."""

import math

import numpy as np

from empirical import joma as E
from theory import joma as J


def test_hblt_sampler_matches_theorem5_cooccurrence():
    cfg = J.JomaConfig(variant="hblt", depth=3, branching=2, rho=0.6, p_top=0.7)
    Y = E.hblt_sample(cfg, 200_000, np.random.default_rng(0))
    H = J.hblt_leaf_lca_heights(3, 2, 0)
    on = Y[:, 0] == 1
    for h in (1, 2, 3):
        l = int(np.nonzero(H == h)[0][0])
        p_hat = Y[on, l].mean()
        # LCA at height h sits at tree level depth - h; its spin mean is rho^(depth-h-1) * rho0
        rho0 = cfg.rho ** (3 - h - 1) * (2 * cfg.p_top - 1) if h < 3 else None
        if rho0 is None:  # LCA = root: the two top-level subtrees are independent
            p = (1 + cfg.rho ** 2 * (2 * cfg.p_top - 1)) / 2
        else:
            p = J.cooccurrence_probability(cfg.rho, h, rho0)
        se = math.sqrt(p * (1 - p) / on.sum())
        assert abs(p_hat - p) < 5 * se, (h, p_hat, p)


def test_hierarchy_generator_structure():
    data = E.RandomCombinationHierarchy(M=20, L=16, num_tokens=(8, 4), num_combinations=(2, 2), seed=1)
    tok, lab, act = data.sample(64, np.random.default_rng(0))
    for i in range(64):
        assert act[1][i].sum() == 1 and act[1][i, lab[i]] == 1
        leaves = {t for t in tok[i] if t != data.M - 1}
        want = {c for a in np.nonzero(act[0][i])[0] for c in data.children[0][a]}
        assert leaves == want
        assert list(tok[i][-len(leaves):]) == sorted(leaves)
