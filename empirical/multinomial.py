"""Fast exact ``Multinomial(n, p)`` rows for a fixed ``(n, p)`` (count-vector SGD, docs/papers/scan_snap.md §1.3).

numpy's ``Generator.multinomial`` draws ``S - 1`` conditional binomials per row in a C loop at
~1.5 us a row (S = 20, n = 127 on this machine); a minibatch of 128 rows then costs more than the
whole gradient. :class:`MultinomialSampler` draws the same law by a balanced binary tree of
binomial splits (``N_left ~ Bin(m, p_left / p_node)`` given the node's count ``m``: exact, the
children's counts are conditionally multinomial), walked draw by draw in a compiled (numba) loop,
each binomial by Walker's alias method from a table of ``Bin(m, pi_v)`` for every node ``v`` and count
``m = 0..n`` (pmf from ``scipy.stats.binom``; exact up to float64 round-off, as numpy's own
inversion sampler). The tables hold ``(S - 1)(n + 1)(n + 2)/2`` entries; past
:data:`TABLE_LIMIT` the same tree draws its binomials with ``Generator.binomial`` (cost independent
of ``n``).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from theory.sampling import alias_table  # Walker/Vose table (accept, alias), shared with the SDEs

__all__ = ["MultinomialSampler", "TABLE_LIMIT"]

#: Largest alias table (entries) built; beyond it the tree uses ``Generator.binomial``.
TABLE_LIMIT = 2_000_000


def _tree_levels(S: int) -> list[list[tuple[int, int, int]]]:
    """Balanced binary splits ``(lo, mid, hi)`` of leaves ``0..S-1``, level by level (root first)."""
    levels, todo = [], [(0, S)]
    while todo:
        level, nxt = [], []
        for lo, hi in todo:
            if hi - lo > 1:
                mid = (lo + hi) // 2
                level.append((lo, mid, hi))
                nxt += [(lo, mid), (mid, hi)]
        if level:
            levels.append(level)
        todo = nxt
    return levels


@lru_cache(maxsize=8)
def _tables(n: int, p: tuple[float, ...]):
    from scipy.stats import binom

    levels = _tree_levels(len(p))
    pa = np.asarray(p)
    nodes = [v for lv in levels for v in lv]
    pis = [pa[lo:mid].sum() / pa[lo:hi].sum() for lo, mid, hi in nodes]
    if len(nodes) * (n + 1) * (n + 2) // 2 > TABLE_LIMIT:
        return levels, np.array(pis), None
    probs, aliases = [], []
    k = np.arange(n + 1)
    for pi in pis:
        pmf = binom.pmf(k[None, :], k[:, None], pi)  # row m: Bin(m, pi) on 0..m (0 past m)
        for m in range(n + 1):
            pr, al = alias_table(pmf[m, :m + 1])
            probs.append(pr)
            aliases.append(al)
    return levels, np.array(pis), (np.concatenate(probs), np.concatenate(aliases))


class MultinomialSampler:
    """Counts ``~ Multinomial(n, p)``: ``sample(rng, N)`` -> (S, N) int64, each column summing
    to ``n``. ``p`` (S,) positive probabilities (normalised here)."""

    def __init__(self, n: int, p):
        p = np.asarray(p, np.float64)
        if p.ndim != 1 or np.any(p <= 0):
            raise ValueError("p must be a 1-d array of positive probabilities")
        self.n, self.S = int(n), p.size
        self.levels, self.pi, self.table = _tables(self.n, tuple((p / p.sum()).tolist()))
        self._plan = self._make_plan()
        L = np.arange(self.n + 2)  # row (node v, count m = L - 1) starts at v * per_node + m (m + 1) / 2
        self._start = np.arange(self.S - 1)[:, None] * ((self.n + 1) * (self.n + 2) // 2) + (L - 1) * L // 2

    def _make_plan(self):
        """Per level: node ids (into ``pi``/the table), and where each child's count goes — the next
        level's node slot or a leaf column."""
        plan, base = [], 0
        for li, level in enumerate(self.levels):
            ids = slice(base, base + len(level))
            base += len(level)
            below = self.levels[li + 1] if li + 1 < len(self.levels) else []
            nxt = {(lo, hi): i for i, (lo, _, hi) in enumerate(below)}
            to_next, to_leaf = [], []
            for i, (lo, mid, hi) in enumerate(level):
                for c, (a, b) in enumerate(((lo, mid), (mid, hi))):
                    col = c * len(level) + i  # children stacked as [left..., right...]
                    (to_leaf.append((col, a)) if b - a == 1 else to_next.append((col, nxt[(a, b)])))
            order = sorted(to_next, key=lambda t: t[1])
            plan.append((ids, np.array([t[0] for t in order], int), np.array([t[0] for t in to_leaf], int),
                         np.array([t[1] for t in to_leaf], int)))
        return plan

    def _children(self) -> np.ndarray:
        """(nodes, 2) children of every node in table order: a node id (>= 0) or a leaf ``-(col+1)``."""
        ids, base = {}, 0
        for level in self.levels:
            for i, (lo, _, hi) in enumerate(level):
                ids[(lo, hi)] = base + i
            base += len(level)
        kids = [[ids[(a, b)] if b - a > 1 else -(a + 1) for a, b in ((lo, mid), (mid, hi))]
                for level in self.levels for lo, mid, hi in level]
        return np.array(kids, np.int64).reshape(-1, 2)

    def sample(self, rng: np.random.Generator, N: int) -> np.ndarray:
        """(S, N) int64 counts: column i is one draw (the transpose of numpy's layout)."""
        out = np.empty((self.S, N), np.int64)
        if self.table is not None:  # Walker: j ~ U{0..m}, kept with probability prob, else alias
            if not hasattr(self, "_kids"):
                self._kids = self._children()
            _tree_walk(rng.random((self.S - 1, N)), self.n, self._kids, self._start, *self.table, out)
            return out
        size = np.full((1, N), self.n + 1, np.int64)  # carried: a node's count + 1 (its pmf's length)
        for ids, nxt_rows, leaf_rows, leaves in self._plan:  # no table: numpy's binomials, level by level
            V = ids.stop - ids.start
            k = rng.binomial(size - 1, self.pi[ids][:, None])
            kids = np.empty((2 * V, N), np.int64)
            np.add(k, 1, out=kids[:V])
            np.subtract(size, k, out=kids[V:])
            out[leaves] = kids[leaf_rows] - 1
            size = kids[nxt_rows]
        return out


@njit(cache=True)
def _tree_walk(u, n, kids, start, prob, alias, out):
    """:meth:`MultinomialSampler.sample` with alias tables, one draw (column) at a time: node ``v``
    with count ``m`` splits it by the alias draw from uniform ``u[v, i]`` in row ``start[v, m + 1]``
    of the table (the vectorised level-by-level walk, in the same arithmetic)."""
    V, N = u.shape
    cnt = np.empty(V, np.int64)
    for i in range(N):
        cnt[0] = n
        for v in range(V):
            m = cnt[v]
            x = u[v, i] * (m + 1)
            j = np.int64(x)
            idx = start[v, m + 1] + j
            k = j if x - j < prob[idx] else alias[idx]
            a, b = kids[v, 0], kids[v, 1]
            if a >= 0:
                cnt[a] = k
            else:
                out[-a - 1, i] = k
            if b >= 0:
                cnt[b] = m - k
            else:
                out[-b - 1, i] = m - k
