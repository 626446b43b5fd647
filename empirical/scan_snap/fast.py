"""Count-vector SGD for Scan & Snap whose cost does not depend on T (docs/papers/scan_snap.md §1.3, Decision 9).

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
products' work, the rest of ``Y`` and ``Z`` never touched. The gradient and the momentum update
are compiled (numba: :func:`_logits`, :func:`_backward`, :func:`_momentum`, the products by BLAS;
at these sizes numpy's per-call overhead was most of a step). Float64 unless ``dtype=np.float32``
is asked for. The torch model (:mod:`empirical.scan_snap.model`) is the reference: the
gradients agree to round-off on the same counts (tests).

It is the same stochastic algorithm as the torch grid (:func:`empirical.scan_snap.experiment.train_grid`):
classes uniform, counts multinomial, batch-mean cross-entropy, PyTorch SGD momentum (``v = mu v +
g``, first step ``v = g``; ``theta += lr v`` is descent on the CE), init zero or PyTorch's default
``U(+-1/sqrt(M_in))``; only the random streams differ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
from numba import njit

from theory.errors import DivergenceError
from theory.scan_snap import ScanSnapTask

from ..multinomial import MultinomialSampler

__all__ = ["CountSGD", "Batch", "BLOCK_ROWS", "count_sgd_runs", "symmetric_observables"]

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
    #: (R, K, P) the output id of each slot's next token when the labels are shuffled (the null
    #: control "shuffled data": the next token drawn independently of the context); None: the
    #: class's own label (the generator)
    labels: np.ndarray | None = None

    def per_sample(self):
        """``(n (R, B) classes, counts (R, B, S))`` in slot order (for checks against the torch model)."""
        R, K, P, S = self.counts.shape
        real = self.mask.astype(bool)
        n = np.broadcast_to(np.arange(K)[None, :, None], real.shape)[real].reshape(R, -1)
        return n, self.counts[real].reshape(R, -1, S)


@njit(cache=True, error_model="numpy")  # x / 0 -> inf or nan (caught as divergence)
def _logits(Y, Z, counts, m, sup, query, F, A, ys):
    """Forward pass of every sample, slot ``p < m[r, k]`` of ``counts`` (R, K, P, S) on class ``k``'s
    support ``sup[k]`` (S,) (row indices of ``Y``, columns of ``Z``): ``F[r, k, p]`` (S,) = LN(q o
    e^{z}) (spec §1.3: ``q o e^{z}`` is proportional to X^T b), ``ys[r, k]`` (S, M_out) = the
    support rows of ``Y``, ``A[r, k, p]`` (M_out,) = decoder logits ``Y^T f`` minus their max (0 on
    the other slots); ``exp`` is then taken by numpy (vectorised; numba's is a scalar call)."""
    R, K, P, S = counts.shape
    Mo = Y.shape[2]
    ez = np.empty_like(F[0, 0, 0])
    for r in range(R):
        for k in range(K):
            n, zr = m[r, k], query[k]
            for s in range(S):
                ys[r, k, s] = Y[r, sup[k, s]]
            zmax = Z[r, zr, sup[k, 0]]
            for s in range(1, S):
                zmax = max(zmax, Z[r, zr, sup[k, s]])
            for s in range(S):
                ez[s] = np.exp(Z[r, zr, sup[k, s]] - zmax)
            for p in range(n):
                nn = 0.0
                for s in range(S):
                    w = ez[s] * counts[r, k, p, s]
                    F[r, k, p, s] = w
                    nn += w * w
                nrm = np.sqrt(nn)
                for s in range(S):
                    F[r, k, p, s] /= nrm
            A[r, k, n:] = 0
            if n == 0:
                continue
            A[r, k, :n] = np.dot(F[r, k, :n], ys[r, k])
            for p in range(n):
                amax = A[r, k, p, 0]
                for o in range(1, Mo):
                    amax = max(amax, A[r, k, p, o])
                for o in range(Mo):
                    A[r, k, p, o] -= amax


@njit(cache=True, error_model="numpy")  # x / 0 -> inf or nan (caught as divergence)
def _backward(E, F, ys, m, sup, qi, labs, inv_b, gY, gZ):
    """Batch-mean ascent gradient of J (spec §1.3, §2.4) from :func:`_logits`' ``F``, ``ys`` and
    ``E = exp(A)``: ``gY`` (R, C + K U, M_out) on the common + DT rows, ``gZ`` (R, n_query, M_in)
    on the query rows (``qi[k]``: class ``k``'s among them); ``labs`` (R, K, P) the output id of each
    slot's next token. ``E`` is overwritten. Returns False
    (gradients unfinished) when a decoder softmax is not finite: a parameter is no longer finite."""
    R, K, P, S = F.shape
    Mo = E.shape[3]
    gY[:] = 0
    gZ[:] = 0
    for r in range(R):
        for k in range(K):
            n = m[r, k]
            if n == 0:
                continue
            D = E[r, k, :n]
            for p in range(n):  # (e_n - alpha) / B
                tot = 0.0
                for o in range(Mo):
                    tot += D[p, o]
                if not np.isfinite(tot):
                    return False
                c = -inv_b / tot
                for o in range(Mo):
                    D[p, o] *= c
                D[p, labs[r, k, p]] += inv_b
            f = F[r, k, :n]
            G = np.dot(D, ys[r, k].T)  # dJ/df = Y (e_n - alpha) on the support
            gys = np.dot(f.T, D)  # sum_p f (e_n - alpha)^T / B
            for s in range(S):
                for o in range(Mo):
                    gY[r, sup[k, s], o] += gys[s, o]
            # through LN and the softmax over tokens: with x = X^T b, dJ/dx = P_perp(f) g / |x|, and
            # the softmax Jacobian diag(x) - x x^T (Eqn. 3's proof) gives x o dJ/dx, i.e.
            # dJ/dz_{psi, l} = f o P_perp(f) g, summed over the samples
            for p in range(n):
                fg = 0.0
                for s in range(S):
                    fg += f[p, s] * G[p, s]
                for s in range(S):
                    gZ[r, qi[k], sup[k, s]] += f[p, s] * (G[p, s] - f[p, s] * fg)
    return True


@njit(cache=True)
def _momentum(theta, v, g, rows, lr, mu):
    """PyTorch SGD momentum on the rows that move: ``v = mu v + g``, ``theta[r, rows[i]] += lr[r]
    v[r, i]`` (ascent on J); ``theta`` (R, M, N), ``v``, ``g`` (R, len(rows), N), ``lr`` (R,).
    The compiled form of :func:`empirical.scan_snap.update.update` (``sgd``, ``maximize=True``; tested equal)."""
    R, n, N = v.shape
    for r in range(R):
        for i in range(n):
            for j in range(N):
                v[r, i, j] = mu * v[r, i, j] + g[r, i, j]
                theta[r, rows[i], j] += lr[r] * v[r, i, j]


class CountSGD:
    """``R`` runs of minibatch SGD with PyTorch momentum (``v = mu v + g; theta += lr v``, ascent on
    J) on the direct (Y, Z) model. ``lr_Y``, ``lr_Z``: (R,) learning rates; ``Y`` (R, M_in, M_out),
    ``Z`` (R, M_in, M_in) start at zero or at PyTorch's default init U(+-1/sqrt(M_in)) drawn from
    ``rng`` (a seeded ``numpy.random.Generator``; same seed -> same numbers).

    ``rng`` may also be a sequence of ``R`` generators, one per run (the seeds of a claim's map
    point, :func:`empirical.scan_snap.experiment.train_seeds`): run ``r`` then draws its init and
    every minibatch from ``rng[r]`` alone, in blocks whose length does not depend on ``R``, so the
    batched runs are exactly the runs made one at a time (tested)."""

    def __init__(self, task: ScanSnapTask, lr_Y, lr_Z, *, batch: int, momentum: float, zero_init: bool,
                 rng, dtype=np.float64, shuffle_labels: bool = False):
        self.task, self.B, self.mu, self.dtype = task, batch, momentum, np.dtype(dtype)
        #: the null control "shuffled data": every sample's next token drawn uniformly over the K
        #: labels, independently of its context (drawn after the block's counts, from the same stream)
        self.shuffle_labels = bool(shuffle_labels)
        self.lr_Y, self.lr_Z = np.asarray(lr_Y, self.dtype), np.asarray(lr_Z, self.dtype)
        R, Mi, Mo, K = self.lr_Y.shape[0], task.M_in, task.M_out, task.K
        self.R = R
        per_run = not isinstance(rng, np.random.Generator)
        self.rng, self._rngs = (None, list(rng)) if per_run else (rng, None)
        if per_run and len(self._rngs) != R:
            raise ValueError(f"{len(self._rngs)} generators for {R} runs")
        if zero_init:
            self.Y, self.Z = np.zeros((R, Mi, Mo), self.dtype), np.zeros((R, Mi, Mi), self.dtype)
        else:
            b = 1.0 / np.sqrt(Mi)
            if per_run:  # each run's init from its own stream: Y then Z
                draws = [(g.uniform(-b, b, (Mi, Mo)), g.uniform(-b, b, (Mi, Mi))) for g in self._rngs]
                self.Y = np.stack([d[0] for d in draws]).astype(self.dtype, copy=False)
                self.Z = np.stack([d[1] for d in draws]).astype(self.dtype, copy=False)
            else:
                self.Y = rng.uniform(-b, b, (R, Mi, Mo)).astype(self.dtype, copy=False)
                self.Z = rng.uniform(-b, b, (R, Mi, Mi)).astype(self.dtype, copy=False)
        self.sup = np.stack([task.support(n) for n in range(task.K)])  # (K, S): equal sizes (generator)
        C, U = task.common.size, task.dt.shape[1]
        if not (np.array_equal(task.common, np.arange(C))
                and np.array_equal(self.sup[:, :C], np.broadcast_to(task.common, (K, C)))
                and np.array_equal(self.sup[:, C:], task.dt) and np.array_equal(task.dt.ravel(), C + np.arange(K * U))):
            raise ValueError("CountSGD needs the official layout: support = common tokens + a DT block per class")
        self.C, self.U, self._ctx = C, U, C + K * U
        self.sup_p = np.take_along_axis(task.P, self.sup, 1)
        if not np.allclose(self.sup_p, self.sup_p[0], rtol=1e-12, atol=0):  # equal up to summation order
            raise ValueError("CountSGD needs one support distribution for every class (the official generator)")
        self._sampler = MultinomialSampler(task.config.T - 1, self.sup_p[0])
        self._qrows, self._qi = np.unique(task.query, return_inverse=True)  # the rows of Z that move
        self._yrows = np.arange(self._ctx)  # the rows of Y that move: common + DT
        self.vY = np.zeros((R, self._ctx, Mo), self.dtype)  # momentum on the rows that move
        self.vZ = np.zeros((R, len(self._qrows), Mi), self.dtype)
        self._g = (np.empty_like(self.vY), np.empty_like(self.vZ))
        self._ys = np.empty((R, K, self.sup.shape[1], Mo), self.dtype)
        self._block, self._next = None, 0
        self.steps_done = 0

    # -- data ------------------------------------------------------------------------------------
    def sample(self) -> Batch:
        """The next step's minibatch per run. Drawn ahead for a block of steps (:data:`BLOCK_ROWS`
        samples at a time: the data do not depend on the parameters), which changes the random
        stream, not the law."""
        if self._block is None or self._next == len(self._block[0]):
            self._draw_block()
        i, self._next = self._next, self._next + 1
        m, counts, mask, labels = self._block
        return Batch(m[i], counts[i], mask[i], None if labels is None else labels[i])

    def _draw_block(self):
        if self._rngs is not None:
            return self._draw_block_per_run()
        R, B, K = self.R, self.B, self.task.K
        steps = max(1, BLOCK_ROWS // (R * B))
        m = self.rng.multinomial(B, np.full(K, 1.0 / K), size=(steps, R))  # classes i.i.d. uniform
        offset = (np.cumsum(m.reshape(-1)) - m.reshape(-1)).reshape(m.shape)  # rows ordered (step, run, class)
        rows = self._sampler.sample(self.rng, steps * R * B).T.astype(self.dtype)  # every row of the block
        slot = np.arange(m.max())
        # slot p of (step, r, k) is row offset + p; slots past m hold any other row (a placeholder,
        # weight 0)
        counts = rows[np.minimum(offset[..., None] + slot, len(rows) - 1)]  # (steps, R, K, P, S)
        labels = (self.task.label[self.rng.integers(0, K, size=counts.shape[:4])] if self.shuffle_labels else None)
        self._block, self._next = (m, counts, (slot < m[..., None]).astype(self.dtype), labels), 0

    def _draw_block_per_run(self):
        """:meth:`_draw_block` with one generator per run: run ``r`` draws ``steps`` minibatches'
        class counts, then their rows, from ``rng[r]`` (``steps`` independent of ``R``), so a run
        draws the same numbers batched or alone."""
        B, K = self.B, self.task.K
        steps = max(1, BLOCK_ROWS // B)
        ms, rows = [], []
        for g in self._rngs:
            ms.append(g.multinomial(B, np.full(K, 1.0 / K), size=steps))  # (steps, K)
            rows.append(self._sampler.sample(g, steps * B).T.astype(self.dtype))  # (steps B, S), (step, class)
        m = np.stack(ms, 1)  # (steps, R, K)
        slot = np.arange(m.max())
        counts = np.empty(m.shape + (slot.size, rows[0].shape[1]), self.dtype)
        for r, (mr, xr) in enumerate(zip(ms, rows)):
            off = (np.cumsum(mr.reshape(-1)) - mr.reshape(-1)).reshape(mr.shape)
            counts[:, r] = xr[np.minimum(off[..., None] + slot, len(xr) - 1)]
        labels = None
        if self.shuffle_labels:  # after the counts, from each run's own stream
            labels = np.stack([self.task.label[g.integers(0, K, size=(m.shape[0], K, slot.size))] for g in self._rngs], 1)
        self._block, self._next = (m, counts, (slot < m[..., None]).astype(self.dtype), labels), 0

    # -- gradient --------------------------------------------------------------------------------
    def _parts(self, batch: Batch):
        """Ascent gradient of J on the rows that move: ``gY`` on the common + DT rows (R, C + K U,
        M_out), ``gZ`` on the query rows (R, n_query, M_in) (spec §1.3, §2.4; batch mean; buffers
        reused by the next call). A non-finite parameter shows in the decoder softmax:
        :class:`DivergenceError` (step -1; :meth:`step` gives its own)."""
        gY, gZ = self._g
        F, A = np.empty_like(batch.counts), np.empty(batch.counts.shape[:3] + (self.task.M_out,), self.dtype)
        _logits(self.Y, self.Z, batch.counts, batch.m, self.sup, self.task.query, F, A, self._ys)
        labs = batch.labels
        if labs is None:
            labs = np.ascontiguousarray(np.broadcast_to(self.task.label[None, :, None], batch.mask.shape))
        if not _backward(np.exp(A, out=A), F, self._ys, batch.m, self.sup, self._qi, labs.astype(np.int64, copy=False),
                         1.0 / self.B, gY, gZ):
            raise DivergenceError(-1, "non-finite parameters in count-vector SGD")
        return gY, gZ

    def gradient(self, batch: Batch):
        """Batch-mean ascent gradient of J per run, ``(gY, gZ)`` shaped like ``Y``, ``Z``."""
        gYr, gZr = self._parts(batch)
        gY, gZ = np.zeros_like(self.Y), np.zeros_like(self.Z)
        gY[:, :self._ctx] = gYr
        gZ[:, self._qrows] = gZr
        return gY, gZ

    def step(self, batch: Batch | None = None):
        """One SGD step on ``batch`` (default: the next one drawn)."""
        try:
            gY, gZ = self._parts(self.sample() if batch is None else batch)
        except DivergenceError as exc:
            raise DivergenceError(self.steps_done, exc.message) from None
        self.steps_done += 1
        mu = self.dtype.type(self.mu)
        _momentum(self.Y, self.vY, gY, self._yrows, self.lr_Y, mu)
        _momentum(self.Z, self.vZ, gZ, self._qrows, self.lr_Z, mu)

    def run(self, steps: int, snapshots=()):
        """``steps`` SGD steps; returns ``{step: Z copy}`` at each step in ``snapshots`` (before it)."""
        snaps = {}
        for s in range(steps):
            if s in snapshots:
                snaps[s] = self.Z.copy()
            self.step()
        return snaps


class _Population:
    """A "sampler" returning ``P`` itself for every sequence: ``T = inf`` (the gradient is
    scale-invariant in the counts, so the frequencies serve as counts)."""

    def __init__(self, p):
        self.p = np.asarray(p, np.float64)

    def sample(self, rng, N):
        return np.broadcast_to(self.p[:, None], (self.p.size, N))


def symmetric_observables(task: ScanSnapTask, Y: np.ndarray, Z: np.ndarray) -> dict[str, np.ndarray]:
    """The spec §6 observables of parameters ``Y`` (R, M_in, M_out), ``Z`` (R, M_in, M_in) and the
    symmetric coordinates the ``T = inf`` system integrates (group means: ``Y_*``, ``z_dt_j`` over
    the classes, ``z_c`` over the query rows and common tokens), each (R,)."""
    from theory.scan_snap import observables_from_parameters, symmetric_y_coordinates

    out = dict(observables_from_parameters(Y, Z, task))
    out.update(symmetric_y_coordinates(task, Y))
    for j in range(task.dt.shape[1]):
        out[f"z_dt_{j}"] = Z[:, task.query, task.dt[:, j]].mean(-1)
    if task.common.size:
        out["z_c"] = Z[:, np.unique(task.query)][:, :, task.common].mean((-2, -1))
    return out


def count_sgd_runs(config, runs: int, *, seed: int = 0, l: int = 1, t_inf: bool = False, dtype=np.float64,
                   seeds=None):
    """``runs`` independent runs of count-vector SGD on ``config`` (classes uniform, exact count
    vectors, batch mean, plain SGD or PyTorch momentum) in one vectorised engine, logged at
    ``config.ode_times()``: a Trajectory with dims ``(run, time)`` of :func:`symmetric_observables`.

    ``l``: SVAG (:mod:`empirical.svag`, Li, Malladi & Arora 2021) with amplification ``l`` — learning
    rates ``eta/l``, ``l`` times the steps and the logging interval, each step's gradient
    ``c1 g1 + c2 g2`` from two independent minibatches (``l = 1``: plain SGD; momentum 0 only).
    ``t_inf``: every sequence's frequencies are ``P(.|n)`` exactly (``T = inf``; the class draw stays
    random). Seeded by ``seed`` (all runs from one generator); or, with ``seeds`` (one integer per run,
    ``runs`` = their number), run ``r`` from its own generator ``default_rng(seeds[r])``: then each run
    is exactly the run ``count_sgd_runs(config, 1, seed=seeds[r])`` (a claim's seeds in one call)."""
    from simulate import make_trajectory

    from theory.errors import ConfigError
    from theory.scan_snap import PAPER, make_task

    from ..svag import SVAG

    if seeds is not None:
        seeds = [int(x) for x in seeds]
        if len(seeds) != runs:
            raise ConfigError("seeds", f"one seed per run: {len(seeds)} seeds for {runs} runs")
    if runs < 1:
        raise ConfigError("runs", f"need at least one run, got {runs}")
    if config.optimizer != "sgd" or config.variant != "counts":
        raise ConfigError("optimizer" if config.optimizer != "sgd" else "variant",
                          "count-vector SGD runs plain SGD on count vectors (optimizer=sgd, variant=counts)")
    svag = SVAG(l)
    if l > 1 and config.momentum:
        raise ConfigError("momentum", "SVAG is run with plain SGD here (momentum 0)")
    task = make_task(config)
    eng = CountSGD(task, [svag.lr(config.eta_Y)] * runs, [svag.lr(config.eta_Z)] * runs, batch=config.batch,
                   momentum=config.momentum, zero_init=config.zero_init, dtype=dtype,
                   rng=np.random.default_rng(seed) if seeds is None else [np.random.default_rng(x) for x in seeds])
    if t_inf:
        eng._sampler = _Population(eng.sup_p[0])
    log_at = svag.log_steps(config)
    c1, c2 = svag.coefficients
    logs = []
    mu = eng.dtype.type(eng.mu)
    for k in range(int(log_at[-1]) + 1):
        if k in log_at:
            logs.append(symmetric_observables(task, eng.Y.astype(np.float64), eng.Z.astype(np.float64)))
        if k == log_at[-1]:
            break
        if l == 1:
            eng.step()
            continue
        try:
            gY, gZ = (g.copy() for g in eng._parts(eng.sample()))
            hY, hZ = eng._parts(eng.sample())
        except DivergenceError as exc:
            raise DivergenceError(k, exc.message) from None
        _momentum(eng.Y, eng.vY, c1 * gY + c2 * hY, eng._yrows, eng.lr_Y, mu)
        _momentum(eng.Z, eng.vZ, c1 * gZ + c2 * hZ, eng._qrows, eng.lr_Z, mu)
        eng.steps_done += 1
    data = {name: np.stack([o[name] for o in logs], axis=-1) for name in logs[0]}
    return make_trajectory(config.ode_times(), data, paper=PAPER, system="count_sgd", source="train",
                           backend="numpy_count_sgd", seed=seed, lead_dims=("run",), config=config,
                           extra_attrs={"svag_l": int(l), "t_inf": int(bool(t_inf)), "runs": int(runs),
                                        **({} if seeds is None else {"run_seeds": json.dumps(seeds)})})
