"""JoMA's sampled data sets (docs/papers/joma.md §3): HBLT bags for the one-block learning-order toy
(§3.2-3.4) and the official Table-1 random-combination hierarchy (§3.5).

The block's class rows ``X = P(. | y)`` and the headline network's mixture sequences are theory
inputs (the ODE and the SDE read them too): :func:`theory.joma.make_data`,
:func:`theory.joma.mixture_data`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from theory.errors import ConfigError
from theory.joma import JomaConfig, hblt_leaf_lca_heights

__all__ = ["hblt_sample", "hblt_block_data", "RandomCombinationHierarchy"]


def hblt_sample(config: JomaConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Leaves ``y_l`` (n, branching^depth) of HBLT (spec §3.2): top-level latents on with
    probability ``p_top`` (``rho0 = 2 p_top - 1``), each child copies its parent with
    probability ``(1 + rho)/2`` and flips it otherwise."""
    b = config.branching
    y = (rng.random((n, b)) < config.p_top).astype(np.int8)
    for _ in range(config.depth - 1):
        parent = np.repeat(y, b, axis=1)
        keep = rng.random(parent.shape) < (1 + config.rho) / 2
        y = np.where(keep, parent, 1 - parent).astype(np.int8)
    return y


def hblt_block_data(config: JomaConfig, n: int, rng: np.random.Generator, query: int = 0):
    """``(X, label, heights)``: ``X`` (n, Mc) bag-of-words frequencies of the contextual tokens
    (all leaves but the query; uniform when none is on), ``label = y_query``, and each contextual
    token's LCA height with the query."""
    Y = hblt_sample(config, n, rng)
    ctx = np.array([l for l in range(Y.shape[1]) if l != query])
    B = Y[:, ctx].astype(float)
    cnt = B.sum(1, keepdims=True)
    X = np.where(cnt > 0, B / np.maximum(cnt, 1), 1.0 / len(ctx))
    return X, Y[:, query].astype(float), hblt_leaf_lca_heights(config.depth, config.branching, query)[ctx]


@dataclass
class RandomCombinationHierarchy:
    """The official Table-1 generator (spec §3.5): level-0 tokens ``0..M-2`` (``M-1`` = padding);
    each latent of level ``i+1`` is a random unique subset of ``num_combinations[i]`` latents of
    level ``i``; the top level has ``num_class`` latents = classes. A sample draws a class and
    expands it top-down; its leaf tokens are written sorted at the end of a length-``L`` sequence."""

    M: int = 20
    L: int = 16
    num_tokens: tuple = (8, 4)  # latents per level 1..; the last is num_class
    num_combinations: tuple = (2, 2)
    seed: int = 0
    children: list = field(init=False)

    @classmethod
    def from_config(cls, config: JomaConfig) -> "RandomCombinationHierarchy":
        """The ``hier`` variant's hierarchy: ``M = vocab``, ``L = seq_len``, the config's levels, ``seed``."""
        return cls(M=config.vocab, L=config.seq_len, num_tokens=config.num_tokens,
                   num_combinations=config.num_combinations, seed=config.seed)

    def __post_init__(self):
        if len(self.num_tokens) != len(self.num_combinations):
            raise ConfigError("num_combinations", "needs one entry per level of num_tokens")
        rng = np.random.default_rng(self.seed)
        sizes = [self.M - 1, *self.num_tokens]
        self.children = []
        for lev in range(len(self.num_tokens)):
            chosen: set = set()
            subsets = []
            while len(subsets) < sizes[lev + 1]:
                s = tuple(sorted(rng.choice(sizes[lev], self.num_combinations[lev], replace=False)))
                if s not in chosen:
                    chosen.add(s)
                    subsets.append(s)
            self.children.append(subsets)
        leaves_max = int(np.prod(self.num_combinations))
        if leaves_max > self.L:
            raise ConfigError("L", f"sequence length {self.L} < max number of leaf tokens {leaves_max}")

    @property
    def num_class(self) -> int:
        return self.num_tokens[-1]

    def sample(self, n: int, rng: np.random.Generator):
        """``(tokens (n, L), labels (n,), active)`` with ``active[i]`` (n, num_tokens[i]) the binary
        activity of level-``i+1`` latents."""
        top = len(self.num_tokens) - 1
        labels = rng.integers(0, self.num_class, n)
        tokens = np.full((n, self.L), self.M - 1, dtype=np.int64)
        active = [np.zeros((n, k), dtype=np.int8) for k in self.num_tokens]
        for i, c in enumerate(labels):
            cur = {int(c)}
            for lev in range(top, -1, -1):
                for a in cur:
                    active[lev][i, a] = 1
                cur = {ch for a in cur for ch in self.children[lev][a]}
            leaves = sorted(cur)
            tokens[i, self.L - len(leaves):] = leaves
        return tokens, labels, active
