"""Count-vector SGD for Scan & Snap whose cost does not depend on T (spec §1.3, Decision 9).

For one sample the loss and every gradient depend on the sequence only through its token counts,
so a minibatch is drawn as counts ``q ~ Multinomial(T - 1, P(.|n))`` on the class support
(:class:`empirical.multinomial.MultinomialSampler`: exact, no sequence, no loop over T) and the
gradient of ``J`` is written out by the chain rule of spec §2.4-2.5 — attention ``q o e^{z}`` on
the support, l2 normalisation, decoder softmax — for ``R`` independent runs at once (all seeds x
learning rates of a grid in one vectorised call).

**Class-slot layout.** A minibatch of ``B`` i.i.d. uniform classes is drawn as its class counts
``m ~ Multinomial(B, 1/K)`` per run (the batch-mean gradient does not depend on the order of the
samples) and stored as slots ``(R, K, P)``, ``P = max m``, slots past ``m`` weighted 0. Then every
sample of slot ``(r, k, .)`` shares its query row of ``Z`` and its support ``common + DT(k)`` (the
official generator, spec §1.4), so the decoder products are ``(P, C) @ (C, M_out)`` on the common
rows of ``Y`` plus ``(P, U) @ (U, M_out)`` on class ``k``'s DT rows: about ``S / M_in`` of the dense
products' work, the rest of ``Y`` and ``Z`` never touched. Numpy; float64 unless ``dtype=
np.float32`` is asked for. The torch model (:mod:`empirical.scan_snap`) is the reference: the
gradients agree to round-off on the same counts (tests).

It is the same stochastic algorithm as the torch grid (:func:`empirical.scan_snap.train_grid`):
classes uniform, counts multinomial, batch-mean cross-entropy, PyTorch SGD momentum (``v = mu v +
g``, first step ``v = g``; ``theta += lr v`` is descent on the CE), init zero or PyTorch's default
``U(+-1/sqrt(M_in))``; only the random streams differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from theory.scan_snap import ScanSnapTask

from .multinomial import MultinomialSampler

__all__ = ["CountSGD", "Batch", "BLOCK_ROWS"]

#: Samples drawn ahead at once (all runs x batch x steps): large enough that the sampler works in
#: bulk, small enough to stay in cache.
BLOCK_ROWS = 8192


@dataclass
class Batch:
    """One minibatch per run in class-slot layout: ``m`` (R, K) class counts (sum B), ``counts``
    (R, K, P, S) support counts (integers stored as floats) of slot ``p < m[r, k]`` (sum T - 1;
    other slots hold a placeholder), ``mask`` (R, K, P) 1.0 on the real slots."""

    m: np.ndarray
    counts: np.ndarray
    mask: np.ndarray

    def per_sample(self):
        """``(n (R, B) classes, counts (R, B, S))`` in slot order (for checks against the torch model)."""
        R, K, P, S = self.counts.shape
        real = self.mask.astype(bool)
        n = np.broadcast_to(np.arange(K)[None, :, None], real.shape)[real].reshape(R, -1)
        return n, self.counts[real].reshape(R, -1, S)


def _softmax_last(a: np.ndarray, ones: np.ndarray, weight: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``weight[..., None] * softmax(a)`` over the last axis, into ``out`` (``a`` may be overwritten).
    Unshifted when every row sum of ``exp`` is a normal number well above underflow (then it equals
    the shifted softmax to round-off); shifted by the row max otherwise."""
    e = np.exp(a, out=out)
    s = e @ ones
    if not (np.isfinite(s).all() and s.min() > np.finfo(s.dtype).tiny * 1e6):
        a -= a.max(-1, keepdims=True)
        e = np.exp(a, out=out)
        s = e @ ones
        if not np.isfinite(s).all():  # NaN/inf logits: a parameter is no longer finite
            from theory.errors import DivergenceError

            raise DivergenceError(-1, "non-finite parameters in count-vector SGD")
    e *= (weight / s)[..., None]
    return e


class CountSGD:
    """``R`` runs of minibatch SGD with PyTorch momentum (``v = mu v + g; theta += lr v``, ascent on
    J) on the direct (Y, Z) model. ``lr_Y``, ``lr_Z``: (R,) learning rates; ``Y`` (R, M_in, M_out),
    ``Z`` (R, M_in, M_in) start at zero or at PyTorch's default init U(+-1/sqrt(M_in)) drawn from
    ``rng`` (a seeded ``numpy.random.Generator``; same seed -> same numbers)."""

    def __init__(self, task: ScanSnapTask, lr_Y, lr_Z, *, batch: int, momentum: float, zero_init: bool,
                 rng: np.random.Generator, dtype=np.float64):
        self.task, self.B, self.mu, self.rng, self.dtype = task, batch, momentum, rng, np.dtype(dtype)
        self.lr_Y = np.asarray(lr_Y, self.dtype)[:, None, None]
        self.lr_Z = np.asarray(lr_Z, self.dtype)[:, None, None]
        R, Mi, Mo, K = self.lr_Y.shape[0], task.M_in, task.M_out, task.K
        self.R = R
        if zero_init:
            self.Y, self.Z = np.zeros((R, Mi, Mo), self.dtype), np.zeros((R, Mi, Mi), self.dtype)
        else:
            b = 1.0 / np.sqrt(Mi)
            self.Y = rng.uniform(-b, b, (R, Mi, Mo)).astype(self.dtype, copy=False)
            self.Z = rng.uniform(-b, b, (R, Mi, Mi)).astype(self.dtype, copy=False)
        self.sup = np.stack([task.support(n) for n in range(task.K)])  # (K, S): equal sizes (generator)
        C, U = task.common.size, task.dt.shape[1]
        if not (np.array_equal(self.sup[:, :C], np.broadcast_to(task.common, (K, C)))
                and np.array_equal(self.sup[:, C:], task.dt) and np.array_equal(task.dt.ravel(), C + np.arange(K * U))):
            raise ValueError("CountSGD needs the official layout: support = common tokens + a DT block per class")
        self.C, self.U, self._ctx = C, U, C + K * U
        self.sup_p = np.take_along_axis(task.P, self.sup, 1)
        if not np.all(self.sup_p == self.sup_p[0]):
            raise ValueError("CountSGD needs one support distribution for every class (the official generator)")
        self._sampler = MultinomialSampler(task.config.T - 1, self.sup_p[0])
        self._qrows, qi = np.unique(task.query, return_inverse=True)  # the rows of Z that move
        self._zk = (np.arange(R)[:, None, None] * Mi * Mi + task.query[:, None] * Mi + self.sup)  # (R, K, S)
        self._gz_index = (np.arange(R)[:, None, None] * len(self._qrows) + qi[:, None]) * Mi + self.sup
        self.vY = np.zeros((R, self._ctx, Mo), self.dtype)  # momentum on the rows that move
        self.vZ = np.zeros((R, len(self._qrows), Mi), self.dtype)
        self._block, self._next = None, 0
        self._scratch = None
        self.steps_done = 0
        self._onesP = np.ones(0, self.dtype)
        q = self._qrows
        self._zrows = slice(q[0], q[-1] + 1) if np.array_equal(q, np.arange(q[0], q[-1] + 1)) else q
        self._k = np.arange(K)
        self._ones = (np.ones(self.sup.shape[1], self.dtype), np.ones(Mo, self.dtype))

    # -- data ------------------------------------------------------------------------------------
    def sample(self) -> Batch:
        """The next step's minibatch per run. Drawn ahead for a block of steps (:data:`BLOCK_ROWS`
        samples at a time: the data do not depend on the parameters), which changes the random
        stream, not the law."""
        if self._block is None or self._next == len(self._block[0]):
            self._draw_block()
        i, self._next = self._next, self._next + 1
        m, counts, mask = self._block
        return Batch(m[i], counts[i], mask[i])

    def _draw_block(self):
        R, B, K = self.R, self.B, self.task.K
        steps = max(1, BLOCK_ROWS // (R * B))
        m = self.rng.multinomial(B, np.full(K, 1.0 / K), size=(steps, R))  # classes i.i.d. uniform
        offset = (np.cumsum(m.reshape(-1)) - m.reshape(-1)).reshape(m.shape)  # rows ordered (step, run, class)
        rows = self._sampler.sample(self.rng, steps * R * B).T.astype(self.dtype)  # every row of the block
        slot = np.arange(m.max())
        # slot p of (step, r, k) is row offset + p; slots past m hold any other row (a placeholder,
        # weight 0)
        counts = rows[np.minimum(offset[..., None] + slot, len(rows) - 1)]  # (steps, R, K, P, S)
        self._block, self._next = (m, counts, (slot < m[..., None]).astype(self.dtype)), 0

    def _buffer_arrays(self, shape):
        """Two scratch arrays of ``shape`` (the (R, K, P, M_out) decoder logits, the largest arrays
        of a step), reused across steps: fresh ones would be page-faulted in every step."""
        size = math.prod(shape)
        if self._scratch is None or self._scratch.shape[1] < size:
            self._scratch = np.empty((2, size), self.dtype)
        return self._scratch[0, :size].reshape(shape), self._scratch[1, :size].reshape(shape)

    # -- gradient --------------------------------------------------------------------------------
    def _parts(self, batch: Batch):
        """Ascent gradient of J on the rows that move: ``gY`` on the common + DT rows (R, C + K U,
        M_out), ``gZ`` on the query rows (R, n_query, M_in) (spec §1.3, §2.4; batch mean). A
        non-finite parameter shows in the decoder softmax: :class:`DivergenceError`."""
        R, K, P, S = batch.counts.shape
        C, Mo = self.C, self.task.M_out
        one_s, one_o = self._ones  # row sums as matvecs (numpy's short-axis reductions are slow)
        zs = self.Z.reshape(-1)[self._zk]  # z_{psi(k), l}: (R, K, S)
        ez = np.exp(zs - zs.max(-1, keepdims=True))
        w = ez[:, :, None, :] * batch.counts  # q o e^{z}, proportional to X^T b (spec §1.3): (R, K, P, S)
        f = w / np.sqrt((w * w) @ one_s)[..., None]  # LN(X^T b)
        Yc = self.Y[:, None, :C]  # common rows (R, 1, C, M_out)
        Yd = self.Y[:, C:self._ctx].reshape(R, K, self.U, Mo)  # DT rows of each class
        a, tmp = self._buffer_arrays((R, K, P, Mo))
        np.matmul(f[..., :C], Yc, out=a)
        a += np.matmul(f[..., C:], Yd, out=tmp)  # decoder logits Y^T f: (R, K, P, M_out)
        d = _softmax_last(a, one_o, batch.mask * (-1.0 / self.B), out=tmp)  # -alpha / B; placeholders 0
        d[:, self._k, :, self.task.label] += batch.mask.transpose(1, 0, 2) / self.B  # (e_n - alpha) / B
        g = np.empty_like(f)
        np.matmul(d, Yc.transpose(0, 1, 3, 2), out=g[..., :C])  # dJ/df = Y (e_n - alpha) on the support
        np.matmul(d, Yd.transpose(0, 1, 3, 2), out=g[..., C:])
        # through LN and the softmax over tokens: with x = X^T b, dJ/dx = P_perp(f) g / |x|, and the
        # softmax Jacobian diag(x) - x x^T (Eqn. 3's proof) gives x o dJ/dx (x . dJ/dx = 0), i.e.
        dlog = g - f * ((f * g) @ one_s)[..., None]
        dlog *= f  # dJ/dz_{psi, l} per sample = f o P_perp(f) g
        gY = np.empty((R, self._ctx, Mo), self.dtype)  # rows common + DT (the others stay 0)
        np.matmul(f[..., :C].reshape(R, K * P, C).transpose(0, 2, 1), d.reshape(R, K * P, Mo), out=gY[:, :C])
        np.matmul(f[..., C:].transpose(0, 1, 3, 2), d, out=gY[:, C:].reshape(R, K, self.U, Mo))
        gZ = np.bincount(self._gz_index.reshape(-1), (self._ones_p(P) @ dlog).reshape(-1), self.vZ.size)
        return gY, gZ.reshape(self.vZ.shape).astype(self.dtype, copy=False)

    def _ones_p(self, P):
        if self._onesP.size != P:
            self._onesP = np.ones(P, self.dtype)
        return self._onesP

    def gradient(self, batch: Batch):
        """Batch-mean ascent gradient of J per run, ``(gY, gZ)`` shaped like ``Y``, ``Z``."""
        gYr, gZr = self._parts(batch)
        gY, gZ = np.zeros_like(self.Y), np.zeros_like(self.Z)
        gY[:, :self._ctx] = gYr
        gZ[:, self._qrows] = gZr
        return gY, gZ

    def step(self):
        from theory.errors import DivergenceError

        try:
            with np.errstate(over="ignore", invalid="ignore"):  # overflow: the softmax falls back; NaN: raised
                gY, gZ = self._parts(self.sample())
        except DivergenceError as exc:
            raise DivergenceError(self.steps_done, exc.message) from None
        self.steps_done += 1
        self.vY *= self.mu
        self.vY += gY
        self.vZ *= self.mu
        self.vZ += gZ
        self.Y[:, :self._ctx] += self.lr_Y * self.vY
        self.Z[:, self._zrows] += self.lr_Z * self.vZ  # a slice when the query rows are contiguous

    def run(self, steps: int, snapshots=()):
        """``steps`` SGD steps; returns ``{step: Z copy}`` at each step in ``snapshots`` (before it)."""
        snaps = {}
        for s in range(steps):
            if s in snapshots:
                snaps[s] = self.Z.copy()
            self.step()
        return snaps
