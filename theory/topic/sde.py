"""The topic paper's minibatch SDE (spec "SDE note"): stage 1 in the full ``(W, b)`` space.

The noise is derived from the per-sample loss of one document (:func:`.derive.document_loss`: the
mean squared error over its ``n_sel`` selected positions, uniform attention, context ``x_bar_S``)
under the document law (:func:`.derive.document_distribution`: topic set ``S`` uniform over the
``C(T, tau)`` sets, labels ``q ~ Multinomial(n_sel, u_S)/n_sel``) — exact: a finite mixture with
closed-form moments. The spec's note is why the SDE is not on the reduced coordinates: at the
stage-1 optimum the per-sample gradient has no component on the topic mode, so the noise lives in
the non-symmetric directions of ``W``.

**The per-sample flow** (``theory.noise``: ``g = -eta grad l``; time = optimiser steps, so
``Δτ = 1`` and ``g`` carries ``eta = lr``): with ``W~ = [W | b]`` (D x (D+1)) and
``x~ = [x_bar; 1]``,

    g(W~; x_bar, q) = -2 eta (W~ x~ - q) x~^T - 2 eta lam [W | 0].

:func:`per_sample_flow` is this formula in numbers; the tests hold it, the drift ``E g`` and the
covariance ``F F^T = Cov g`` against the sympy system :func:`.derive.full_space_system` (built from
the per-sample loss) on a small instance, and the covariance against per-document gradients of
the real network (``empirical.topic``).

**The coordinates** (exact, not a reduction): every ``g`` is ``(...) x~^T`` plus the weight decay,
and ``x~ = [x_bar_S; 1]`` lies in the ``r = T + 2``-dimensional span ``C`` of the topic
indicators, the ``[MASK]`` id and the bias coordinate. From ``W = 0, b = 0`` (the SDE's start;
``init_scale = 0``) ``W~(t) = Y(t) Bᵀ`` with ``B`` the orthonormal basis of ``C`` (:func:`basis`)
and ``Y`` (D x r): the other ``D (D + 1 - r)`` coordinates of ``W~`` have zero drift and zero
diffusion. The state is ``Y`` (row-major, ``D r`` numbers); the observables are computed on the full
``W = Y Bᵀ``. So the SDE is the full-space one at ``D r`` instead of ``D (D+1)`` numbers
(1212 instead of 10302 at ``T = v = 10``).

**The diffusion factor** ``F`` (``F Fᵀ = Cov_doc[g]``; the engine applies ``sqrt(Δτ/B) F dW``,
``B`` = documents per batch): ``|S|`` columns ``sqrt(1/|S|) (g_S - E g)`` (which document topic set:
``g_S = E[g | S]``, state-dependent) and ``|S| tau v`` constant columns
``(2 eta/sqrt(n_sel |S| tau v)) (e_w - u_S) x~_Sᵀ`` (which labels, given ``S``: the multinomial's
``diag u_S - u_S u_Sᵀ = Σ_w (e_w - u_S)(e_w - u_S)ᵀ/(tau v)``). Noise dimension ``|S| (1 + tau v)``.

**What the per-sample law leaves out** (docs/sde.md; where the calibration breaks): finite ``N``
(the context ``x_bar`` of a real document fluctuates around ``x_bar_S`` by ``O(N^{-1/2})`` and
contains its own selected position; the drift is the ``N -> inf`` flow), the count of selected
positions (``n_sel = p_m N`` here; a document's count is ``Binomial(N, p_m)``, which scales the
topic-set part of the covariance by ``1 + (1 - p_m)/(p_m N)``, 1.03 at ``N = 200``), and the
non-Gaussian shape of a small batch's noise.

Supported settings (:func:`check_config`): the ``stage1`` variant with the tau-topic documents,
squared loss, plain SGD, the theory vocabulary, fresh documents with dynamic masking, from
``W = 0``. Float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..errors import ConfigError
from .config import PAPER, TopicConfig
from .population import context_basis, document_table, off_symmetric_residual, word_topics

__all__ = ["TopicSDE", "sde", "check_config", "basis", "per_sample_flow", "labels_per_document", "OBSERVABLES"]

#: the observables of an SDE ensemble (names as the training run logs them)
OBSERVABLES = ("A", "B", "C", "m", "r", "s", "b_w", "b_M", "within_topic_mode", "topic_mode", "block_difference",
               "offdiagonal_block_difference", "off_symmetric_residual", "context_residual", "norm_W_V")


def check_config(config: TopicConfig) -> None:
    """:class:`ConfigError` for a setting the SDE's document law does not describe."""
    need = {"variant": "stage1", "data": "tau", "loss": "squared", "optimizer": "sgd", "vocab": "theory",
            "random_ids": "words", "masking": "dynamic"}
    for name, want in need.items():
        if getattr(config, name) != want:
            raise ConfigError(name, f"the topic SDE describes {name}={want!r} (stage-1 SGD on fresh tau-topic "
                                    f"documents), got {getattr(config, name)!r}")
    if config.n_docs:
        raise ConfigError("n_docs", "the topic SDE draws fresh documents every step (n_docs=0); a fixed training "
                                    "set repeats its documents")
    if config.init_scale:
        raise ConfigError("init_scale", "the topic SDE starts at W = 0, b = 0 (init_scale=0); a random init would "
                                        "give every run its own start")


def labels_per_document(config: TopicConfig) -> float:
    """``n_sel``: the expected number of selected (labelled) positions of a document, ``p_m N``
    (``N`` the mean length when lengths vary)."""
    length = (config.N + config.N_max) / 2 if config.N_max > config.N else config.N
    return config.p_m * length


def basis(config: TopicConfig) -> np.ndarray:
    """``B`` ((D+1) x r, orthonormal columns): the topic indicators ``1_t/sqrt(v)`` on the words, the
    ``[MASK]`` id, the bias coordinate (``r = T + 2``; :func:`.population.context_basis`)."""
    return context_basis(np.concatenate([word_topics(config.T, config.v), [-1]]), config.n_words)


def per_sample_flow(W, b, xbar, q, eta: float, lam: float, xp=np):
    """``(g_W, g_b)`` of one document (module docstring): ``-2 eta (W xbar + b - q) xbar^T -
    2 eta lam W`` and ``-2 eta (W xbar + b - q)``; ``q`` has length D (zero on ``[MASK]``)."""
    r = W @ xbar + b - q
    return -2 * eta * xp.outer(r, xbar) - 2 * eta * lam * W, -2 * eta * r


@dataclass(frozen=True, eq=False)
class TopicSDE:
    """``dY = f(Y) dt + sqrt(Δτ/B) F(Y) dW`` on the coordinates ``Y`` of ``[W | b] = Y Bᵀ``
    (module docstring), a :func:`simulate.solve_sde` model. ``Δτ = 1`` (time = optimiser steps),
    ``B = config.batch`` documents. Drift and factor are the per-sample flow's mean and covariance
    over the document law (``n_sel`` = :func:`labels_per_document`)."""

    config: TopicConfig
    paper: str = PAPER

    def __post_init__(self):
        check_config(self.config)

    @property
    def name(self) -> str:
        return f"stage1_full_{self.config.keys}_sde"

    # Equal (and hashed) by structure: the learning rate, batch and masking travel in ``args``, so
    # the compiled ensemble solver is reused across them (simulate caches it per model object).
    def _structure(self):
        c = self.config
        return (c.T, c.v, c.tau, c.keys)

    def __eq__(self, other):
        return isinstance(other, TopicSDE) and self._structure() == other._structure()

    def __hash__(self):
        return hash(("TopicSDE", self._structure()))

    # -- sizes -------------------------------------------------------------------------------------
    @property
    def D(self) -> int:
        return self.config.n_words + 1

    @property
    def r(self) -> int:
        return self.config.T + 2

    @property
    def dim(self) -> int:
        return self.D * self.r

    @property
    def n_sets(self) -> int:
        return math.comb(self.config.T, self.config.tau)

    @property
    def noise_dim(self) -> int:
        return self.n_sets * (1 + self.config.tau * self.config.v)

    @property
    def dt(self) -> float:
        """Preferred Euler–Maruyama step: one optimiser step (``Δτ = 1``)."""
        return float(self.config.ode_time(1) - self.config.ode_time(0))

    #: a deterministic factor: no model randomness per step
    uniforms_per_step = 0

    # -- the document law in the basis --------------------------------------------------------------
    @cached_property
    def _tables(self):
        """``(Xh (n_S, r), U (n_S, D), label factor (D r, n_S tau v))`` in numbers."""
        c = self.config
        sets, X, U = document_table(c)
        Xt = np.concatenate([X, np.ones((len(sets), 1))], axis=1)  # x~ = [x_bar; 1]
        Bm = basis(c)
        Xh = Xt @ Bm
        if not np.allclose(Xh @ Bm.T, Xt, atol=1e-14):
            raise AssertionError("the documents' contexts leave the span of the basis")
        nS, tv = len(sets), c.tau * c.v
        top = word_topics(c.T, c.v)
        cols = []
        for k, S in enumerate(sets):
            for w in np.nonzero(np.isin(top, S))[0]:
                e = -U[k].copy()
                e[w] += 1.0
                cols.append(np.outer(e, Xh[k]).ravel())  # (e_w - u_S) x~_S^T in Y coordinates
        FL = np.stack(cols, axis=1) * 2 / math.sqrt(labels_per_document(c) * nS * tv)  # times eta in args
        return Xh, U, FL

    def _numbers(self) -> dict:
        """The step's constants in numpy (:meth:`args` for jax, :meth:`numba_increment`)."""
        c = self.config
        Xh, U, FL = self._tables
        decay = np.ones(self.r)
        decay[-1] = 0.0  # weight decay on W, not on b
        top = word_topics(c.T, c.v)
        sets = np.asarray(document_table(c)[0])  # (n_S, tau): the topics of each set, ascending
        words = np.stack([np.nonzero(np.isin(top, S))[0] for S in sets])  # (n_S, tau v)
        tv = c.tau * c.v
        # the structure the increment uses: a set's words are its topics' blocks of v, in order, and
        # u_S is uniform on them (1/(tau v)), zero on [MASK]
        if not np.array_equal(words, (sets[:, :, None] * c.v + np.arange(c.v)).reshape(len(sets), -1)):
            raise AssertionError("the words of a topic set are not its topics' blocks of v")
        if not np.allclose(U, np.stack([np.isin(np.arange(self.D), w) / tv for w in words]), atol=0):
            raise AssertionError("u_S is not uniform on the set's words")
        # per topic k, the (set, slot) pairs that hold it: each topic lies in C(T-1, tau-1) sets
        pairs = [np.argwhere(sets == k) for k in range(c.T)]
        if len({len(q) for q in pairs}) != 1:
            raise AssertionError("topics lie in different numbers of sets")
        holders = np.stack([q[:, 0] for q in pairs])  # (T, m): the sets holding topic k
        perm = np.stack([q[:, 0:1] * tv + q[:, 1:2] * c.v + np.arange(c.v) for q in pairs])  # (T, m, v)
        return {"Xh": Xh, "U": U, "FL": FL * c.lr, "holders": holders, "label_index": perm.reshape(-1), "Xk": Xh[holders],
                "label_scale": 2 * c.lr / math.sqrt(labels_per_document(c) * self.n_sets * words.shape[1]),
                "eta": float(c.lr), "lam_decay": 2 * c.lam * decay, "scale": math.sqrt(self.dt / c.batch)}

    def args(self):
        import jax.numpy as jnp

        return {k: jnp.asarray(v) for k, v in self._numbers().items()}

    def numba_increment(self):
        """``(increment, params)`` for ``simulate.solve_sde(..., backend="numba")``: :meth:`increment`
        in loops (:mod:`theory.topic.sde_numba`), tested equal to it."""
        from .sde_numba import increment, kernel_params

        return increment, kernel_params(self._numbers(), self.config)

    def initial_state(self) -> np.ndarray:
        return np.zeros(self.dim)

    # -- drift and diffusion (jax) ------------------------------------------------------------------
    def _set_flows(self, y, args):
        """``g_S = E[g | S]`` per topic set, (n_S, D, r), in Y coordinates."""
        Y = y.reshape(self.D, self.r)
        R = Y @ args["Xh"].T - args["U"].T  # (D, n_S): residual W~ x~_S - u_S
        return -2 * args["eta"] * (R.T[:, :, None] * args["Xh"][:, None, :]) - args["eta"] * Y * args["lam_decay"]

    def drift(self, t, y, args):
        return self._set_flows(y, args).mean(0).reshape(-1)

    def diffusion(self, t, y, args, key):
        import jax.numpy as jnp

        G = self._set_flows(y, args).reshape(self.n_sets, -1)  # (n_S, D r)
        FS = (G - G.mean(0)).T / jnp.sqrt(float(self.n_sets))
        return args["scale"] * jnp.concatenate([FS, args["FL"]], axis=1)

    def increment(self, t, y, h, dW, noise, args):
        """``f h + sqrt(Δτ/B) F dW`` without forming ``F`` (the engine's structured-diffusion hook):
        ``dY = [-2 eta R (h/n_S + s (xi - mean xi)/sqrt(n_S)) + s c Z] X~ - h eta lam Y`` with ``R = Y X~ᵀ
        - Uᵀ`` the residuals per topic set, ``xi`` the topic-set noises, ``Z[:, S] = sum_w zeta_Sw (e_w -
        u_S)`` the label noises, ``s = sqrt(Δτ/B)``, ``c = 2 eta/sqrt(n_sel n_S tau v)`` — the same numbers
        as ``drift * h + diffusion @ dW``. Evaluated without any (D, n_S) array: with weights ``w`` per
        set, ``(R diag w) X~ = Y (X~ᵀ diag w X~) - Uᵀ diag w X~``; ``Uᵀ X`` is, on a word of topic k, the sum
        over the sets holding k over ``tau v``; ``Z X~`` gathers each topic's label noises."""
        import jax.numpy as jnp

        c = self.config
        nS, tv, r = self.n_sets, c.tau * c.v, self.r
        Y = y.reshape(self.D, r)
        Xh = args["Xh"]
        xi, zeta = dW[:nS], dW[nS:]
        w = h / nS + args["scale"] * (xi - xi.mean()) / math.sqrt(nS)
        sc = args["scale"] * args["label_scale"]
        a = 2 * args["eta"] * w - sc * zeta.reshape(nS, tv).sum(1)  # the sets' weights on Uᵀ
        UX = (a[:, None] * Xh)[args["holders"]].sum(1) / tv  # (T, r): Uᵀ (a X~) on each topic's words
        ZX = jnp.einsum("kmi,kmr->kir", zeta[args["label_index"]].reshape(c.T, -1, c.v), args["Xk"])
        words = jnp.repeat(UX, c.v, axis=0) + sc * ZX.reshape(c.n_words, r)
        dY = -2 * args["eta"] * (Y @ (Xh.T @ (w[:, None] * Xh))) + jnp.concatenate([words, jnp.zeros((1, r), y.dtype)])
        return (dY - h * args["eta"] * Y * args["lam_decay"]).reshape(-1)

    # -- observables (numpy) ------------------------------------------------------------------------
    def full_matrices(self, Y) -> tuple[np.ndarray, np.ndarray]:
        """``(W (..., D, D), b (..., D))`` from states ``Y`` (..., D r)."""
        Wt = np.asarray(Y).reshape(*np.shape(Y)[:-1], self.D, self.r) @ basis(self.config).T
        return Wt[..., :, : self.D], Wt[..., :, self.D]

    def observables(self, Y) -> dict[str, np.ndarray]:
        """:data:`OBSERVABLES` of states ``Y`` (..., D r), read from ``Y`` itself: in the basis
        (:func:`basis`) ``W[d, j] = Y[d, t(j)]/sqrt(v)`` on a word ``j`` of topic ``t(j)``, ``W[d, MASK] =
        Y[d, T]``, ``b = Y[:, r - 1]``, so every observable is a mean or a sum of squares over the
        ``D x r`` numbers — no ``D x D`` matrix per state (an ensemble saves ``paths x times`` states).
        Equal to the definitions on the full matrices (:meth:`full_observables`; tests). In blocks of
        states (~32 MiB of temporaries at a time)."""
        Y = np.asarray(Y, dtype=np.float64)
        lead = Y.shape[:-1]
        flat = Y.reshape(-1, self.dim)
        block = max(1, 2**22 // self.dim)
        parts = [self._observables(flat[i:i + block]) for i in range(0, flat.shape[0], block)]
        return {k: np.concatenate([p[k] for p in parts]).reshape(lead) for k in OBSERVABLES}

    def _observables(self, Y) -> dict[str, np.ndarray]:
        c = self.config
        nw, v, T_ = c.n_words, c.v, c.T
        Y = Y.reshape(*Y.shape[:-1], self.D, self.r)
        top = word_topics(T_, v)
        rv = math.sqrt(v)
        words = Y[..., :nw, :T_] / rv  # (..., nw, T): W[d, j] for j of topic t, rows d the words
        own = words[..., np.arange(nw), top]  # W[d, j] with t(j) = t(d): (..., nw)
        other = ~(top[:, None] == np.arange(T_)[None, :])  # (nw, T): topic t is not word d's
        A = own.mean(-1)  # the diagonal and the same-topic entries are equal (W is constant on blocks)
        C_ = (words * other).sum((-2, -1)) / other.sum()
        res = np.sqrt(v * ((own - A[..., None]) ** 2).sum(-1)  # diagonal (1) + same-topic (v - 1) entries
                      + v * (((words - C_[..., None, None]) * other) ** 2).sum((-2, -1)))  # v entries per block
        mask = Y[..., nw, :]
        return {"A": A, "B": A, "C": C_, "m": Y[..., :nw, T_].mean(-1), "r": mask[..., :T_].mean(-1) / rv,
                "s": mask[..., T_], "b_w": Y[..., :nw, -1].mean(-1), "b_M": mask[..., -1],
                "within_topic_mode": A - A, "topic_mode": v * (A - C_), "block_difference": A - C_,
                "offdiagonal_block_difference": A - C_, "off_symmetric_residual": res, "context_residual": res,
                "norm_W_V": np.sqrt((Y[..., :, :-1] ** 2).sum((-2, -1)))}

    def full_observables(self, Y) -> dict[str, np.ndarray]:
        """:data:`OBSERVABLES` by their definitions on the full ``W`` rebuilt from ``Y`` (..., D r)
        (``D x D`` per state: the reference of :meth:`observables`, for a few states)."""
        c = self.config
        W, b = self.full_matrices(Y)
        nw, v = c.n_words, c.v
        top = word_topics(c.T, c.v)
        same = top[:, None] == top[None, :]
        diag = np.eye(nw, dtype=bool)
        Ww = W[..., :nw, :nw]
        A, B_, C_ = (Ww[..., m].mean(-1) for m in (diag, same & ~diag, ~same))
        res = off_symmetric_residual(W, np.concatenate([top, [-1]]))
        return {"A": A, "B": B_, "C": C_, "m": W[..., :nw, nw].mean(-1), "r": W[..., nw, :nw].mean(-1),
                "s": W[..., nw, nw], "b_w": b[..., :nw].mean(-1), "b_M": b[..., nw],
                "within_topic_mode": A - B_, "topic_mode": A + (v - 1) * B_ - v * C_,
                "block_difference": Ww[..., same].mean(-1) - C_, "offdiagonal_block_difference": B_ - C_,
                "off_symmetric_residual": res, "context_residual": res,  # the state lies in the context span
                "norm_W_V": np.sqrt((W**2).sum((-2, -1)))}


def sde(config: TopicConfig):
    """The row's ``sde`` slot: ``(TopicSDE(config), config.ode_times())`` for ``simulate.solve_sde``."""
    return TopicSDE(config), config.ode_times()
