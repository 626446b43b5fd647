"""Population quantities on the full vocabulary (docs/papers/topic.md §3.5, §3.6), written once for any array
module: ``xp=numpy`` for plain evaluation, ``xp=jax.numpy`` (the default) for autodiff.

* :func:`full_value_matrix` / :func:`reduced_coordinates` — symmetric coordinates <-> ``(W, b)``;
* :func:`off_symmetric_residual` — ``||W - sum_k omega_k Pi_k||_F`` of the word block (spec §6);
  :func:`context_residual` — the same for the part of ``[W | b]`` in the span of the long-document
  contexts (:func:`context_basis`: the part the ``N -> inf`` minibatch noise reaches);
* :func:`context_vector` — ``x_bar_S`` of a long masked document (same law as
  :func:`~theory.topic.derive.context_frequencies`); :func:`document_table` — every topic set's
  context and label law (the documents the minibatch noise is drawn from);
* :func:`stage2_loss` — the population per-selected-position loss for any key x query logit
  matrix; :func:`tied_logits` — the slides' tying; :func:`gamma_from`.

Shapes: the theory vocabulary has ``D = Tv + 1`` ids (``Tv`` words, topic ``id // v``, then
``[MASK]``); ``W`` is ``(D, D)``, ``b`` is ``(D,)``, logits are ``(D, D)`` (key x query). Float64.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from theory.core import enable_x64

from .config import TopicConfig

__all__ = ["enable_x64", "word_topics", "full_value_matrix", "reduced_coordinates", "off_symmetric_residual",
           "context_basis", "context_residual",
           "context_vector", "documents", "document_table", "stage2_loss", "tied_logits", "gamma_from"]


def _jnp(xp):
    if xp is None:
        enable_x64()
        import jax.numpy as xp
    return xp


def word_topics(T_: int, v_: int) -> np.ndarray:
    """Topic of each word id ``0..Tv-1``: ``id // v``."""
    return np.repeat(np.arange(T_), v_)


def full_value_matrix(coords: dict[str, float], T_: int, v_: int) -> tuple[np.ndarray, np.ndarray]:
    """``(W, b)`` on the theory vocabulary (``Tv`` words then ``[MASK]``) from symmetric coords."""
    n = T_ * v_
    top = word_topics(T_, v_)
    same = top[:, None] == top[None, :]
    W = np.zeros((n + 1, n + 1))
    W[:n, :n] = np.where(same, coords["B"], coords["C"])
    W[np.arange(n), np.arange(n)] = coords["A"]
    W[:n, n] = coords["m"]
    W[n, :n] = coords["r"]
    W[n, n] = coords["s"]
    b = np.full(n + 1, coords["b_w"])
    b[n] = coords["b_M"]
    return W, b


def reduced_coordinates(W: np.ndarray, b: np.ndarray | None, topic_of: np.ndarray,
                        mask_id: int | None = None) -> dict[str, float]:
    """Symmetric coordinates of a full matrix as means over the entry classes (spec §6).

    ``topic_of[i]`` is the topic of id ``i`` (``-1`` for special tokens, excluded from the word
    classes); ``mask_id`` locates the MASK row/column. Works for ``W^V`` or ``E``."""
    W = np.asarray(W, dtype=np.float64)
    words = np.nonzero(topic_of >= 0)[0]
    tw = topic_of[words]
    Ww = W[np.ix_(words, words)]
    same = tw[:, None] == tw[None, :]
    diag = np.eye(len(words), dtype=bool)
    Av = Ww[diag].mean()
    Bv = Ww[same & ~diag].mean()
    Cv = Ww[~same].mean()
    v_ = int(same[0].sum())
    out = {"A": Av, "B": Bv, "C": Cv}
    if mask_id is not None:
        out.update(m=W[words, mask_id].mean(), r=W[mask_id, words].mean(), s=W[mask_id, mask_id])
    if b is not None:
        out["b_w"] = float(np.asarray(b)[words].mean())
        if mask_id is not None:
            out["b_M"] = float(np.asarray(b)[mask_id])
    out["within_topic_mode"] = Av - Bv
    out["topic_mode"] = Av + (v_ - 1) * Bv - v_ * Cv
    out["block_difference"] = Ww[same].mean() - Cv
    out["offdiagonal_block_difference"] = Bv - Cv
    return {k: float(x) for k, x in out.items()}


def off_symmetric_residual(W, topic_of: np.ndarray) -> np.ndarray:
    """``||W_w - sum_k omega_k Pi_k||_F`` over the word block ``W_w`` of ``W`` (..., D, D): its
    distance from the symmetric subspace ``span{I, P, J}`` (spec §3.5 "Eigen-form", §6), whose
    projection is ``A I + B (P - I) + C (J - P)`` with ``A, B, C`` the means of the diagonal,
    same-topic and different-topic entries. Vectorised over leading axes; ``topic_of[i] < 0``
    marks special tokens (excluded)."""
    W = np.asarray(W, dtype=np.float64)
    words = np.nonzero(np.asarray(topic_of) >= 0)[0]
    tw = np.asarray(topic_of)[words]
    Ww = W[..., words[:, None], words[None, :]]
    same = tw[:, None] == tw[None, :]
    diag = np.eye(len(words), dtype=bool)
    classes = (diag, same & ~diag, ~same)
    proj = np.zeros_like(Ww)
    for cls in classes:
        mean = Ww[..., cls].mean(-1)
        proj = proj + mean[..., None, None] * cls
    return np.sqrt(((Ww - proj) ** 2).sum((-2, -1)))


def context_basis(topic_of: np.ndarray, mask_id: int) -> np.ndarray:
    """Orthonormal basis ((D+1) x (T+2)) of the span of the augmented contexts ``[x_bar_S; 1]`` of
    long documents (spec §3.5: ``x_bar_S`` is constant on each topic's words, plus ``[MASK]``):
    the topic indicators ``1_t/sqrt(v)``, the ``[MASK]`` id and the bias coordinate (the last)."""
    topic_of = np.asarray(topic_of)
    D, T_ = topic_of.size, int(topic_of.max()) + 1
    Bm = np.zeros((D + 1, T_ + 2))
    for t in range(T_):
        ids = np.nonzero(topic_of == t)[0]
        Bm[ids, t] = 1 / np.sqrt(ids.size)
    Bm[mask_id, T_] = 1.0
    Bm[D, T_ + 1] = 1.0
    return Bm


def context_residual(W, b, topic_of: np.ndarray, mask_id: int) -> np.ndarray:
    """:func:`off_symmetric_residual` of ``W`` restricted to the context span: ``[W | b] B Bᵀ``
    with ``B`` = :func:`context_basis`. The ``N -> inf`` document law moves ``[W | b]`` only in
    this span (:mod:`theory.topic.sde`); what a finite document's context adds lies outside it."""
    Bm = context_basis(topic_of, mask_id)
    Wt = np.concatenate([np.asarray(W, np.float64), np.asarray(b, np.float64)[..., :, None]], axis=-1)
    return off_symmetric_residual((Wt @ Bm @ Bm.T)[..., :, :-1], topic_of)


def context_vector(T_: int, v_: int, topics, pm: float, pc: float, pr: float, keys: str) -> np.ndarray:
    """Numeric ``x_bar_S`` (length ``Tv + 1``) for the document topic set ``topics`` (spec §3.5)."""
    n = T_ * v_
    in_doc = np.isin(word_topics(T_, v_), topics)
    x = np.zeros(n + 1)
    if keys == "theory":
        x[:n] = in_doc * ((1 - pm + pm * pc) / (len(topics) * v_)) + pm * pr / n
        x[n] = pm * (1 - pc - pr)
    else:
        x[:n] = in_doc / (len(topics) * v_)
    return x


def documents(T_: int, tau_: int, which: str) -> list[tuple[int, ...]]:
    """Topic sets averaged over: all ``C(T, tau)`` (``"all"``) or just ``{0..tau-1}`` (``"one"``)."""
    if which == "one":
        return [tuple(range(tau_))]
    return list(itertools.combinations(range(T_), tau_))


def document_table(config: TopicConfig) -> tuple[list[tuple[int, ...]], np.ndarray, np.ndarray]:
    """The documents of the tau-topic model with a long context (``N -> inf``): every topic set
    ``S`` (equally likely), its context ``x_bar_S`` (:func:`context_vector`, ``config.keys``) and
    its label law ``u_S`` (uniform over the document's words; zero on ``[MASK]``). Returns
    ``(sets, X (n_S, D), U (n_S, D))`` on the theory vocabulary (``D = Tv + 1``)."""
    sets = documents(config.T, config.tau, "all")
    n = config.n_words
    X = np.stack([context_vector(config.T, config.v, S, config.p_m, config.p_c, config.p_r, config.keys)
                  for S in sets])
    U = np.zeros((len(sets), n + 1))
    for k, S in enumerate(sets):
        U[k, :n] = np.isin(word_topics(config.T, config.v), S) / (config.tau * config.v)
    return sets, X, U


def stage2_loss(logits, W, b, config: TopicConfig, *, documents: str = "all", xp=None):
    """Population per-selected-position loss with ``W^V, b`` given and key x query attention
    logits ``logits`` ((Tv+1) x (Tv+1); column = query token), ``N -> inf`` (spec §3.6).

    Query token at a selected position: ``[MASK]`` (prob ``1-p_c-p_r``), the word itself
    (``p_c``; target = that word) or a uniform random word (``p_r``; target ~ ``u_S``). Keys:
    mass ``x_bar_k exp(logit[k, q])``, normalised (spec §3.6 step 1). Squared error against
    ``e_w`` expands to ``||o - E[e_w]||^2 + Var``. ``documents="one"`` uses the single topic set
    ``{0..tau-1}``: exact when ``logits`` and ``W`` are invariant under topic permutations.
    ``xp``: array module (``numpy``, or ``jax.numpy`` by default for autodiff)."""
    jnp = _jnp(xp)
    T_, v_, tau_ = config.T, config.v, config.tau
    n = T_ * v_
    pm, pc, pr = config.p_m, config.p_c, config.p_r
    logits = jnp.asarray(logits)
    W = jnp.asarray(W)
    b = jnp.asarray(b)
    total = 0.0
    docs = _docs(T_, tau_, documents)
    top = word_topics(T_, v_)
    for S in docs:
        x = jnp.asarray(context_vector(T_, v_, S, pm, pc, pr, config.keys))
        in_doc = np.isin(top, S)
        u = np.zeros(n + 1)
        u[:n] = in_doc / (tau_ * v_)
        u = jnp.asarray(u)
        var = 1.0 - 1.0 / (tau_ * v_)
        # attention of every query token q (columns): mass x_k exp(logit[k, q]) normalised
        wts = x[:, None] * jnp.exp(logits - logits.max(0, keepdims=True))
        att = wts / wts.sum(0, keepdims=True)
        out = W @ att + b[:, None]  # (D, queries): output for query token q
        err_u = ((out - u[:, None]) ** 2).sum(0) + var  # targets ~ u_S
        L_mask = err_u[n]
        L_rand = err_u[:n].mean()
        # correct query: the token is the target word w, uniform over the document's words
        eye = jnp.eye(n + 1)[:, :n]
        err_self = ((out[:, :n] - eye) ** 2).sum(0)
        L_corr = (err_self * jnp.asarray(in_doc)).sum() / in_doc.sum()
        total = total + (1 - pc - pr) * L_mask + pc * L_corr + pr * L_rand
    return total / len(docs)


_docs = documents


def tied_logits(T_: int, v_: int, s1=0.0, s2=0.0, s3=0.0, s_Mw=0.0, s_wM=0.0, s_MM=0.0, xp=None):
    """The (Tv+1)^2 logit matrix with the slides' tying: same token ``s1``, same topic ``s2``,
    different topic ``s3``; MASK key/word query ``s_Mw``, word key/MASK query ``s_wM``, ``s_MM``."""
    jnp = _jnp(xp)
    n = T_ * v_
    top = word_topics(T_, v_)
    same = jnp.asarray(top[:, None] == top[None, :])
    eye = jnp.eye(n, dtype=bool)
    words = jnp.where(eye, s1, jnp.where(same, s2, s3))
    col = jnp.full((n, 1), s_wM)
    row = jnp.full((1, n), s_Mw)
    return jnp.block([[words, col], [row, jnp.full((1, 1), s_MM)]])


def gamma_from(v_: int, s1: float, s2: float, s3: float = 0.0) -> float:
    """``gamma = ((v-1)/v) e^{s2-s3} + (1/v) e^{s1-s3}`` (spec §3.3)."""
    return ((v_ - 1) * math.exp(s2 - s3) + math.exp(s1 - s3)) / v_
