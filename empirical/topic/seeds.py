"""Every seed of one topic-model config in one vectorised run (the claims' ``runs``, docs/claims.md).

:func:`train_seeds` gives *the same numbers* as :func:`~empirical.topic.experiment.train` run once
per seed (tested to rounding): each seed keeps its own :class:`~.experiment.TopicExperiment`, set
up exactly as the Trainer sets it up (its generator seeded with the seed), which draws that seed's
documents and masks (numpy, as in a per-seed run) and logs its observables; only the step — the
forward pass, the loss, the backward pass and the update rule — runs once for all seeds, on
parameters stacked along a leading seed dim (the model's arithmetic is batched; the loss is the
sum of the per-seed losses, so each seed's gradient is its own). Documents of different lengths
are padded to a common length with positions that are neither keys nor selected (their attention
weight is exactly 0, so they change nothing but the order of summation).

One-hot embeddings only (the ``stage1``, ``joint`` and ``attention`` variants, every optimiser,
loss and data law); the ``embedding`` variant falls back to one :func:`train` per seed.

Float64, like the per-seed runs. A seed whose loss or observables stop being finite is recorded
as NaN from that step on (a per-seed run raises :class:`~theory.errors.DivergenceError` there);
the other seeds are unaffected (no arithmetic couples the seeds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
import xarray as xr

from theory.topic import TopicConfig, context_residual, off_symmetric_residual, reduced_coordinates

from ..trainer import resolve_device, torch_threads
from . import update
from .data import DocumentSampler, apply_mask, documents, mask_draws, mask_selection
from .experiment import TopicExperiment, train
from .model import attention_statistics

__all__ = ["train_seeds", "ATTENTION_KEYS"]

#: the final attention statistics of :func:`train` (attrs there; per-seed variables here)
ATTENTION_KEYS = ("attention_same_word", "attention_same_topic_other_word", "attention_different_topic",
                  "attention_uniform", "alpha_hat", "beta_hat", "gamma_hat")


def train_seeds(config: TopicConfig, *, seeds: Sequence[int], device: str = "cpu",
                attention_docs: int = 100) -> xr.Dataset:
    """Train ``config`` for every seed of ``seeds`` at once; a trajectory with a leading ``seed``
    dim (the variables of :func:`train`'s trajectory, logged at ``config.log_steps()``), plus
    ``final_value`` (seed, row, col: the final ``W_V``, or ``E`` in the embedding setting) and the
    final attention statistics of :func:`train` (``attention_docs`` held-out documents) as
    variables ``final_<name>`` with dim ``seed`` when attention is trained. Cached per process (same config, seeds
    and device: the same run), so a claim's map cells, the compare report and the figures share
    it."""
    return _cached(config, tuple(int(s) for s in seeds), str(resolve_device(device)), int(attention_docs)).copy()


@lru_cache(maxsize=64)
def _cached(config: TopicConfig, seeds: tuple[int, ...], device: str, attention_docs: int) -> xr.Dataset:
    if not seeds:
        raise ValueError("train_seeds needs at least one seed")
    if config.embedding != "one_hot":
        runs = [train(config, device=device, seed=s, attention_docs=attention_docs) for s in seeds]
        return _stack([r[0] for r in runs], seeds).assign(
            final_value=(("seed", "row", "col"), np.stack([r[1].value_like_matrix() for r in runs])))
    with torch_threads(1):  # as the Trainer runs (one CPU thread)
        return _batched(config, seeds, torch.device(device), attention_docs)


def _batched(c: TopicConfig, seeds: tuple[int, ...], dev: torch.device, attention_docs: int) -> xr.Dataset:
    from simulate.trajectory import make_trajectory

    exps = []
    for s in seeds:  # the Trainer's set-up of each seed (global seed, then the experiment's generator)
        torch.manual_seed(s)
        gen = torch.Generator(device=dev)
        gen.manual_seed(s)
        exp = TopicExperiment(c)
        exp.setup(dev, gen)
        exps.append(exp)
    names = list(exps[0].trained)
    params = {n: torch.stack([e.trained[n].detach() for e in exps]) for n in names}
    frozen = {n: torch.stack([getattr(e.model, n).detach() for e in exps])  # buffers (frozen W_V, b, ...)
              for n in ("W_V", "b", "W_K", "W_Q") if n not in names}
    _bind(exps, params)
    state = update.init(params, config=c, xp=torch)
    uniform, d_a = exps[0].model.uniform, exps[0].model.d_a
    log_at = {int(s) for s in c.log_steps()}
    rows: list[list[dict[str, float]]] = [[] for _ in seeds]
    dead = np.full(len(seeds), -1)  # the logged index from which a seed is NaN (-1: alive)

    eval_docs = _eval_docs(exps, dev) if c.variant in ("joint", "attention") else None

    def log(extra: list[dict[str, float]]):
        with np.errstate(all="ignore"), torch.no_grad():
            P = {**frozen, **params}
            norms = {f"norm_{n}": torch.linalg.norm(P[n], dim=(-2, -1)).cpu().numpy() for n in ("W_K", "W_Q", "W_V")}
            gam = None if eval_docs is None else _gamma_hat(P, *eval_docs, vocab=exps[0].vocab, v=c.v, d_a=d_a)
            for i, e in enumerate(exps):
                obs = {k: x[i] for k, x in norms.items()}  # as TopicExperiment.observables, batched
                M, b = e.value_like_matrix(), e.model.b.detach().cpu().numpy()
                obs.update(reduced_coordinates(M, b, e.vocab.topic_of, mask_id=e.vocab.mask))
                obs["off_symmetric_residual"] = off_symmetric_residual(M, e.vocab.topic_of)
                obs["context_residual"] = context_residual(M, b, e.vocab.topic_of, e.vocab.mask)
                if gam is not None:
                    obs["gamma_hat"] = gam[i]
                rows[i].append({k: float(v) for k, v in {**obs, **extra[i]}.items()})
                if dead[i] < 0 and not all(math.isfinite(v) for v in rows[i][-1].values()):
                    dead[i] = len(rows[i]) - 1

    log([{} for _ in seeds])
    for step in range(c.steps):
        batch = _batches(exps, dev)
        for p in params.values():
            p.requires_grad_(True)
        losses = _losses({**frozen, **params}, *batch, c, uniform, d_a)
        total = losses.sum()
        if c.lam > 0 and "W_V" in params:
            total = total + c.lam * (params["W_V"] ** 2).sum()
        grads = torch.autograd.grad(total, [params[n] for n in names])
        with torch.no_grad():
            params, state = update.update(dict(zip(names, grads)), state, {n: params[n].detach() for n in names},
                                          config=c, xp=torch)
        _bind(exps, params)
        if step + 1 in log_at:
            loss = losses.detach().cpu().numpy()
            for i in np.nonzero(~np.isfinite(loss) & (dead < 0))[0]:
                dead[i] = len(rows[i])
            log([{"minibatch_loss": float(x)} for x in loss])
    times = np.array([c.ode_time(s) for s in sorted(log_at)])
    keys = sorted({k for r in rows[0] for k in r})
    data = np.array([[[r.get(k, np.nan) for r in rs] for rs in rows] for k in keys])  # (var, seed, time)
    for i, d in enumerate(dead):
        if d >= 0:
            data[:, i, d:] = np.nan
    variables = {k: data[j] for j, k in enumerate(keys)}
    variables["step"] = np.tile(np.array(sorted(log_at), dtype=np.float64), (len(seeds), 1))
    traj = make_trajectory(times, variables, paper=exps[0].paper, system=exps[0].name, source="train",
                           backend=f"torch-{dev.type}", parameter_values=exps[0].parameters_info(),
                           status=0, message="ok", lead_dims=("seed",), config=c,
                           extra_attrs={"batched_seeds": len(seeds)}).assign_coords(seed=list(seeds))
    traj = traj.assign(final_value=(("seed", "row", "col"), np.stack([e.value_like_matrix() for e in exps])))
    if c.attention == "trained" and attention_docs:
        stats = []
        for s, e, d in zip(seeds, exps, dead):
            tok, val = DocumentSampler(e.config, e.vocab, 10_000 + s).sample(attention_docs)
            st = attention_statistics(e.model, tok, val, e.vocab, c.v)
            stats.append({k: (np.nan if d >= 0 else st[k]) for k in ATTENTION_KEYS})
        traj = traj.assign({f"final_{k}": ("seed", np.array([st[k] for st in stats])) for k in ATTENTION_KEYS})
    return traj


def _eval_docs(exps, dev):
    """Every seed's held-out documents of :meth:`TopicExperiment.observables` (first 100
    positions, START dropped), padded to a common length: ``(tokens, valid)`` tensors ``(S, B, L)``."""
    voc = exps[0].vocab
    toks, vals = [], []
    for e in exps:
        tok, val = e.eval_docs
        if voc.start is not None:
            tok, val = tok[:, 1:], val[:, 1:]
        toks.append(tok[:, :100])
        vals.append(val[:, :100])
    L = max(t.shape[1] for t in toks)
    return torch.as_tensor(_pad(toks, L, 0), device=dev), torch.as_tensor(_pad(vals, L, False), device=dev), \
        [t.shape[1] for t in toks]


def _gamma_hat(P, tokens, valid, widths, vocab, v: int, d_a: int) -> np.ndarray:
    """:func:`~.model.attention_statistics`' ``gamma_hat`` for every seed at once (one-hot
    embeddings: the logit of key token ``u`` for query token ``t`` is ``(W_K^T W_Q)_{ut}/sqrt(d_a)``)."""
    S_ = tokens.shape[0]
    sid = torch.arange(S_, device=tokens.device)[:, None, None, None]
    logits = torch.einsum("sau,sat->sut", P["W_K"], P["W_Q"]) / math.sqrt(d_a)
    scores = logits[sid, tokens[:, :, :, None], tokens[:, :, None, :]]  # (S, B, L_key, L_query)
    att = torch.softmax(scores.masked_fill(~valid[:, :, :, None], float("-inf")), dim=2).cpu().numpy()
    top = vocab.topic_of[tokens.cpu().numpy()]
    word = (top >= 0) & (np.arange(tokens.shape[2]) < np.asarray(widths)[:, None, None])  # not the padding
    pair = word[:, :, :, None] & word[:, :, None, :]
    tok = tokens.cpu().numpy()
    same_word = tok[:, :, :, None] == tok[:, :, None, :]
    same_topic = top[:, :, :, None] == top[:, :, None, :]
    att = np.where(pair, att, 0.0)

    def mean(mask):
        return (att * mask).sum((1, 2, 3)) / mask.sum((1, 2, 3))

    dt = mean(pair & ~same_topic)
    a_hat, b_hat = mean(pair & same_topic & ~same_word) / dt, mean(pair & same_word) / dt
    return ((v - 1) * a_hat + b_hat) / v


def _bind(exps, params) -> None:
    """Point every seed's module parameters at its row of the stacked tensors (no copy), so the
    per-seed code (observables, attention statistics) reads the batched run's values."""
    for i, e in enumerate(exps):
        for n, p in params.items():
            e.trained[n].data = p[i].detach()


def _pad(arrays, width: int, fill) -> np.ndarray:
    """Stack per-seed ``(B, L_i)`` arrays as ``(S, B, width)``, padding the last dim with ``fill``."""
    return np.stack([a if a.shape[-1] == width else
                     np.concatenate([a, np.full((*a.shape[:-1], width - a.shape[-1]), fill, a.dtype)], -1)
                     for a in arrays])


def _batches(exps, dev):
    """Every seed's minibatch of this step, as :meth:`TopicExperiment.batch` draws it (each seed's
    numbers from its own generators, in the same order), transformed once for all seeds:
    ``(masked, key_ok, labels, selected)`` as ``(S, B, L)`` tensors; a seed's positions beyond its
    own width are padding (token 0, neither key nor selected)."""
    c, voc = exps[0].config, exps[0].vocab
    if exps[0].dataset is None:
        draws = [e.sampler.draw(c.batch) for e in exps]
        widths = [d["u"].shape[1] + (2 if voc.start is not None else 0) for d in draws]
        L = max(d["u"].shape[1] for d in draws)
        stacked = {"lens": np.stack([d["lens"] for d in draws]), "topics": np.stack([d["topics"] for d in draws]),
                   "u": _pad([d["u"] for d in draws], L, 1.0), "word": _pad([d["word"] for d in draws], L, 0)}
        tok, val = documents(stacked, c, voc)
        static = None
    else:  # a fixed training set: each seed's own documents (and static masks), padded
        idx = [e.sampler.rng.integers(0, c.n_docs, size=c.batch) for e in exps]
        widths = [e.dataset[0].shape[1] for e in exps]
        W = max(widths)
        tok = _pad([e.dataset[0][i] for e, i in zip(exps, idx)], W, 0)
        val = _pad([e.dataset[1][i] for e, i in zip(exps, idx)], W, False)
        static = ((_pad([e.dataset[2][i] for e, i in zip(exps, idx)], W, 0),
                   _pad([e.dataset[3][i] for e, i in zip(exps, idx)], W, False)) if c.masking == "static" else None)
    if static is None:
        uni = [e.mask_rng.random((c.batch, w)) for e, w in zip(exps, widths)]
        sel = np.stack([mask_selection(tok[i, :, :w], val[i, :, :w], c, voc, e.mask_rng, uniform=u)
                        for i, (e, w, u) in enumerate(zip(exps, widths, uni))]) if len(set(widths)) == 1 else \
            _pad([mask_selection(tok[i, :, :w], val[i, :, :w], c, voc, e.mask_rng, uniform=u)
                  for i, (e, w, u) in enumerate(zip(exps, widths, uni))], tok.shape[-1], False)
        md = [mask_draws(e.mask_rng, (c.batch, w), c, voc) for e, w in zip(exps, widths)]
        masked = apply_mask(tok, sel, {"u": _pad([d["u"] for d in md], tok.shape[-1], 1.0),
                                       "rand": _pad([d["rand"] for d in md], tok.shape[-1], 0)}, c, voc)
    else:
        masked, sel = static
    key_ok = val & ~sel if c.keys == "code" else val
    as_t = lambda a: torch.as_tensor(a, device=dev)  # noqa: E731
    return as_t(masked), as_t(key_ok), as_t(tok), as_t(sel)


def _losses(P, tokens, key_ok, labels, sel, c: TopicConfig, uniform: bool, d_a: int) -> torch.Tensor:
    """Per-seed loss ``(S,)`` on the selected positions (:func:`~.model.loss_on_selected` of
    :class:`~.model.TopicTransformer`'s output), parameters stacked by seed.

    With one-hot embeddings a query's output depends on the document only through the counts of
    its key tokens, and on the query only through its token: ``o(b, t) = sum_u n_b(u) e^{S_ut} W_V[:, u]
    / sum_u n_b(u) e^{S_ut} + b`` with ``S = W_K^T W_Q / sqrt(d_a)`` (``S = 0``: uniform attention),
    ``n_b(u)`` the keys of token ``u`` in document ``b``. The loss is summed through the counts
    ``c_b(t, y)`` of selected positions with query token ``t`` and label ``y``: squared,
    ``sum_{t} n_b(t) |o|^2 - 2 sum_y c_b(t, y) o_y + n_b(t)``; cross-entropy,
    ``sum_t n_b(t) logsumexp(o) - sum_y c_b(t, y) o_y``. The same numbers as the per-position
    sums, in another order of summation (rounding only); no ``(B, L, L)`` tensor is formed."""
    W_V, b = P["W_V"], P["b"]
    S_, B, L = tokens.shape
    D = W_V.shape[-1]
    dt = W_V.dtype
    keys = torch.zeros(S_, B, D, dtype=dt, device=W_V.device).scatter_add_(2, tokens, key_ok.to(dt))  # n_b(u)
    if uniform:  # every query of a document sees the same context x_bar: W_V x_bar + b
        q_tok = torch.zeros_like(tokens)
        Dq = 1
        out = (torch.einsum("sbu,sdu->sbd", keys / keys.sum(2, keepdim=True), W_V) + b[:, None, :])[:, :, None, :]
    else:
        q_tok, Dq = tokens, D
        logits = torch.einsum("sau,sat->sut", P["W_K"], P["W_Q"]) / math.sqrt(d_a)  # (S, D_key, D_query)
        weight = torch.softmax(torch.log(keys)[:, :, :, None] + logits[:, None], dim=2)  # (S, B, D_key, D_query)
        out = torch.einsum("sdu,sbut->sbtd", W_V, weight) + b[:, None, None, :]  # (S, B, D_query, D)
    # counts of the selected positions by (query token, label)
    flat = ((torch.arange(S_, device=tokens.device)[:, None, None] * B + torch.arange(B, device=tokens.device)[:, None])
            * Dq + q_tok) * D + labels
    cnt = torch.zeros(S_ * B * Dq * D, dtype=dt, device=W_V.device)
    cnt = cnt.index_add_(0, flat[sel], torch.ones(int(sel.sum()), dtype=dt, device=W_V.device)).view(S_, B, Dq, D)
    n = cnt.sum(-1)  # (S, B, Dq): selected positions per (document, query token)
    hit = (cnt * out).sum(-1)
    if c.loss == "ce":
        per = n * torch.logsumexp(out, dim=-1) - hit
    else:
        per = n * (out * out).sum(-1) - 2 * hit + n
    return per.sum((1, 2)) / n.sum((1, 2))


def _stack(trajs, seeds) -> xr.Dataset:
    """Per-seed trajectories of :func:`train` -> one Dataset with dim ``seed`` (attention
    statistics from the attrs as variables)."""
    out = xr.concat([t.drop_attrs() if hasattr(t, "drop_attrs") else t for t in trajs], dim="seed",
                    combine_attrs="drop_conflicts").assign_coords(seed=list(seeds))
    extra = {f"final_{k}": ("seed", np.array([t.attrs[k] for t in trajs])) for k in ATTENTION_KEYS if k in trajs[0].attrs}
    out = out.assign(extra)
    out.attrs.update({k: v for k, v in trajs[0].attrs.items() if k not in ATTENTION_KEYS and k != "seed"})
    return out
