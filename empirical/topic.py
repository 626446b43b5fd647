"""Topic structure in PyTorch: the documents of papers/topic.md §1, BERT-style masking, the
one-layer transformer of §2 and the observables of §6.

Read top to bottom: vocabulary -> documents -> masking -> model -> observables -> experiment ->
``train``. Float64 by default (the comparison with the float64 ODE is the point).

Vocabulary layouts (``config.vocab``):
* ``theory``: ids ``0..Tv-1`` are words (topic ``id // v``), id ``Tv`` is ``[MASK]``;
* ``code``: the official layout ``PAD=0, MASK=1, START=2, END=3``, word ``k`` -> id ``k+4``
  (topic ``(id-4)//v``); documents are wrapped in START ... END (spec §1.3).

Time: the Trainer logs at ``config.log_steps()`` with ODE time ``config.ode_time(step)`` (the
convention is stated once, in :mod:`theory.topic.config`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from theory.errors import check_choice
from theory.topic import PAPER, VARIANTS, TopicConfig, reduced_coordinates

from .trainer import ModuleState, Trainer

__all__ = ["Vocabulary", "vocabulary", "DocumentSampler", "mask_batch", "TopicTransformer",
           "TopicExperiment", "attention_statistics", "train", "run", "VARIANTS"]


# ------------------------------------------------------------------------------------------------
# Vocabulary (spec §1.3)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Vocabulary:
    size: int
    mask: int
    pad: int | None
    start: int | None
    end: int | None
    word_offset: int
    topic_of: np.ndarray  # topic of each id, -1 for special tokens

    @property
    def n_words(self) -> int:
        return int((self.topic_of >= 0).sum())


def vocabulary(config: TopicConfig) -> Vocabulary:
    n = config.T * config.v
    if config.vocab == "theory":
        topic = np.concatenate([np.arange(n) // config.v, [-1]])
        return Vocabulary(n + 1, n, None, None, None, 0, topic)
    # official ids: topic of id i >= 4 is (i - 4) // v; specials excluded (spec §7 bug 2 fixed)
    topic = np.concatenate([[-1, -1, -1, -1], np.arange(n) // config.v])
    return Vocabulary(n + 4, 1, 0, 2, 3, 4, topic)


# ------------------------------------------------------------------------------------------------
# Documents (spec §1.1 tau-topic model; §1.3 LDA)
# ------------------------------------------------------------------------------------------------
class DocumentSampler:
    """Draws documents as token ids with numpy (seeded). ``sample(B)`` returns ``tokens`` (B, L)
    int64 and ``valid`` (B, L) bool (positions beyond a document's length are PAD / invalid)."""

    def __init__(self, config: TopicConfig, vocab: Vocabulary, seed: int):
        self.c, self.vocab = config, vocab
        self.rng = np.random.default_rng(seed)

    def lengths(self, B: int) -> np.ndarray:
        c = self.c
        if c.N_max and c.N_max > c.N:
            return self.rng.integers(c.N, c.N_max + 1, size=B)
        return np.full(B, c.N)

    def topic_weights(self, B: int) -> np.ndarray:
        """(B, T) per-document topic distribution: tau distinct topics uniformly (theory) or
        ``Dir(alpha 1_T)`` (LDA)."""
        c = self.c
        if c.data == "lda":
            return self.rng.dirichlet(np.full(c.T, c.alpha), size=B)
        chosen = np.argsort(self.rng.random((B, c.T)), axis=1)[:, : c.tau]
        w = np.zeros((B, c.T))
        np.put_along_axis(w, chosen, 1.0 / c.tau, axis=1)
        return w

    def sample(self, B: int) -> tuple[np.ndarray, np.ndarray]:
        c, voc = self.c, self.vocab
        lens = self.lengths(B)
        L = int(lens.max())
        theta = self.topic_weights(B)
        cum = np.cumsum(theta, axis=1)
        u = self.rng.random((B, L))
        topic = (u[..., None] > cum[:, None, :]).sum(-1).clip(max=c.T - 1)
        word = topic * c.v + self.rng.integers(0, c.v, size=(B, L))
        tokens = word + voc.word_offset
        valid = np.arange(L)[None, :] < lens[:, None]
        if voc.start is not None:  # official: START + words + END, PAD after
            pad = np.full((B, 1), voc.pad)
            tokens = np.concatenate([np.full((B, 1), voc.start), tokens, pad], axis=1)
            tokens[np.arange(B), lens + 1] = voc.end
            valid = np.concatenate([np.ones((B, 1), bool), valid, np.zeros((B, 1), bool)], axis=1)
            valid[np.arange(B), lens + 1] = True
            tokens = np.where(valid, tokens, voc.pad)
        else:
            tokens = np.where(valid, tokens, 0)
        return tokens.astype(np.int64), valid


def mask_batch(tokens: np.ndarray, valid: np.ndarray, config: TopicConfig, vocab: Vocabulary,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """BERT-style masking (spec §1.2): each word position is selected w.p. ``p_m`` (at least one
    per document: if none is, one uniformly random word position is); a selected position
    becomes MASK w.p. ``1-p_c-p_r``, a random id w.p. ``p_r`` (words only, or all ids with
    ``random_ids="all"`` as in the code), unchanged w.p. ``p_c``. Returns ``(masked, selected)``."""
    c = config
    is_word = valid & (vocab.topic_of[tokens] >= 0)
    sel = is_word & (rng.random(tokens.shape) < c.p_m)
    none = ~sel.any(1)
    if none.any():
        for b in np.nonzero(none)[0]:
            sel[b, rng.choice(np.nonzero(is_word[b])[0])] = True
    u = rng.random(tokens.shape)
    masked = tokens.copy()
    to_mask = sel & (u < 1 - c.p_c - c.p_r)
    to_rand = sel & (u >= 1 - c.p_c - c.p_r) & (u < 1 - c.p_c)
    if c.random_ids == "all":
        rand = rng.integers(0, vocab.size, size=tokens.shape)
    else:
        rand = rng.integers(0, vocab.n_words, size=tokens.shape) + vocab.word_offset
    masked[to_mask] = vocab.mask
    masked[to_rand] = rand[to_rand]
    return masked, sel


# ------------------------------------------------------------------------------------------------
# Model (spec §2.1): f = W_pred (W_V Z) Attn + b, Z = W_E X, column-wise softmax over keys
# ------------------------------------------------------------------------------------------------
class TopicTransformer(nn.Module):
    """One layer, one head, no FFN / LayerNorm / residual.

    ``embedding``: ``one_hot`` (``W_E = I``, ``W_pred = I``) or ``trained`` (``W_E`` (d, D),
    tied ``W_pred = W_E^T``). ``attention``: ``uniform`` (``W_K = W_Q = 0`` frozen: every valid
    key weighs the same) or ``trained`` (scores ``(W_K Z)^T (W_Q Z)/sqrt(d_a)``). ``value``:
    ``trained``, or frozen ``identity`` / ``block`` (0/1 same-topic matrix over word ids). The
    value bias ``b`` is trained (it plays ``b_pred``: attention columns sum to 1).
    """

    def __init__(self, config: TopicConfig, vocab: Vocabulary, generator: torch.Generator,
                 dtype=torch.float64):
        super().__init__()
        c = config
        D = vocab.size
        self.D, self.d_a = D, c.d_a or D
        self.uniform = c.attention == "uniform"
        self.one_hot = c.embedding == "one_hot"
        d = D

        def gauss(shape, std):
            return torch.randn(shape, generator=generator, dtype=dtype) * std if std > 0 else torch.zeros(shape, dtype=dtype)

        if c.value == "trained":
            self.W_V = nn.Parameter(gauss((d, d), c.init_scale))
        elif c.value == "identity":
            self.register_buffer("W_V", torch.eye(d, dtype=dtype))
        else:
            top = torch.as_tensor(vocab.topic_of)
            blk = ((top[:, None] == top[None, :]) & (top[:, None] >= 0)).to(dtype)
            self.register_buffer("W_V", blk)
        self.b = nn.Parameter(torch.zeros(D, dtype=dtype))
        if self.uniform:
            self.register_buffer("W_K", torch.zeros(self.d_a, d, dtype=dtype))
            self.register_buffer("W_Q", torch.zeros(self.d_a, d, dtype=dtype))
        else:
            self.W_K = nn.Parameter(gauss((self.d_a, d), c.kq_scale))
            self.W_Q = nn.Parameter(gauss((self.d_a, d), c.kq_scale))
        if not self.one_hot:  # identity init keeps E = W_E^T W_E in the symmetric algebra
            self.W_E = nn.Parameter(c.init_scale * torch.eye(d, D, dtype=dtype) if c.embedding_init == "identity"
                                    else gauss((d, D), c.init_scale))

    def embed_columns(self) -> torch.Tensor:
        """``W_E`` as (d, D): identity for one-hot embeddings."""
        return torch.eye(self.D, dtype=self.b.dtype, device=self.b.device) if self.one_hot else self.W_E

    def attention(self, tokens: torch.Tensor, key_ok: torch.Tensor) -> torch.Tensor:
        """(B, L_key, L_query) attention, each query column sums to 1 over allowed keys."""
        if self.uniform:
            att = key_ok.to(self.b.dtype)[:, :, None].expand(-1, -1, tokens.shape[1])
            return att / att.sum(1, keepdim=True)
        E = self.embed_columns()
        K = (self.W_K @ E)[:, tokens]  # (d_a, B, L)
        Q = (self.W_Q @ E)[:, tokens]
        scores = torch.einsum("abk,abq->bkq", K, Q) / math.sqrt(self.d_a)
        scores = scores.masked_fill(~key_ok[:, :, None], float("-inf"))
        return torch.softmax(scores, dim=1)

    def forward(self, tokens: torch.Tensor, key_ok: torch.Tensor):
        """Outputs (B, D, L); (B, D, 1) under uniform attention (identical for every query)."""
        E = self.embed_columns()
        VE = self.W_V @ E  # (d, D)
        if self.uniform:
            # every query sees the same context: W_pred W_V x_bar + b
            hist = torch.zeros(tokens.shape[0], self.D, dtype=E.dtype, device=E.device)
            hist.scatter_add_(1, tokens, key_ok.to(E.dtype))
            xbar = hist / hist.sum(1, keepdim=True)  # (B, D)
            out = xbar @ VE.T  # (B, d)
            if not self.one_hot:
                out = out @ E  # W_pred = W_E^T: (B, d) -> (B, D)
            return (out + self.b)[:, :, None]  # (B, D, 1): the same for every query
        att = self.attention(tokens, key_ok)  # (B, Lk, Lq)
        vals = VE[:, tokens]  # (d, B, L)
        ctx = torch.einsum("dbk,bkq->bdq", vals, att)
        if not self.one_hot:
            ctx = torch.einsum("de,bdq->beq", E, ctx)
        return ctx + self.b[None, :, None]


def loss_on_selected(out: torch.Tensor, labels: torch.Tensor, selected: torch.Tensor, kind: str) -> torch.Tensor:
    """Mean over selected positions: ``||f - e_y||^2`` summed over the vocabulary (squared) or
    cross-entropy (spec §2.1, §8 Decision 1)."""
    b_idx, pos = torch.nonzero(selected, as_tuple=True)
    o = out[b_idx, :, pos if out.shape[2] > 1 else torch.zeros_like(pos)]  # (n_sel, D)
    y = labels[selected]
    if kind == "ce":
        return torch.nn.functional.cross_entropy(o, y)
    onehot = torch.zeros_like(o).scatter_(1, y[:, None], 1.0)
    return ((o - onehot) ** 2).sum(1).mean()


# ------------------------------------------------------------------------------------------------
# Observables (spec §6)
# ------------------------------------------------------------------------------------------------
@torch.no_grad()
def attention_statistics(model: TopicTransformer, tokens: np.ndarray, valid: np.ndarray,
                         vocab: Vocabulary, v: int, max_len: int = 100) -> dict[str, float]:
    """Average attention (unmasked documents, first ``max_len`` positions, uniform = 1/L) paid by a
    word query to keys that are the same word (incl. itself), same topic & different word,
    different topic (spec §5.6). Topics from ``vocab.topic_of`` (``(id-4)//v`` in the official
    layout; special tokens excluded as queries and keys: the code's off-by-4 lookup is not copied).
    Also ``gamma_hat = ((v-1) alpha_hat + beta_hat)/v`` with ``alpha_hat, beta_hat`` the ratios
    to the different-topic average."""
    dev = model.b.device
    if vocab.start is not None:  # drop START; keep max_len tokens
        tokens, valid = tokens[:, 1:], valid[:, 1:]
    tokens, valid = tokens[:, :max_len], valid[:, :max_len]
    t = torch.as_tensor(tokens, device=dev)
    ok = torch.as_tensor(valid, device=dev)
    att = model.attention(t, ok).cpu().numpy()  # (B, Lk, Lq)
    top = vocab.topic_of[tokens]
    word = top >= 0
    pair = word[:, :, None] & word[:, None, :]
    same_word = tokens[:, :, None] == tokens[:, None, :]
    same_topic = top[:, :, None] == top[:, None, :]
    sw = att[pair & same_word].mean()
    st = att[pair & same_topic & ~same_word].mean()
    dt = att[pair & ~same_topic].mean()
    a_hat, b_hat = st / dt, sw / dt
    return {"attention_same_word": float(sw), "attention_same_topic_other_word": float(st),
            "attention_different_topic": float(dt), "attention_uniform": 1.0 / tokens.shape[1],
            "alpha_hat": float(a_hat), "beta_hat": float(b_hat), "gamma_hat": float(((v - 1) * a_hat + b_hat) / v)}


# ------------------------------------------------------------------------------------------------
# Experiment
# ------------------------------------------------------------------------------------------------
@dataclass
class TopicExperiment(ModuleState):
    """One training run. ``variant`` picks the freeze pattern on top of ``config``
    (:meth:`TopicConfig.for_variant`; a setting the variant would ignore is a ConfigError):

    * ``stage1``: uniform attention, one-hot, W_V trained (the stage-1 theorem setting);
    * ``joint``: W_K, W_Q, W_V trained together from small init (two stages, spec §3.4);
    * ``attention``: W_V frozen (``config.value``: block or identity), attention trained;
    * ``embedding``: W_V = I frozen, uniform attention, W_E trained (spec §3.1).
    """

    config: TopicConfig
    variant: str = "stage1"
    dtype: torch.dtype = torch.float64
    paper: str = PAPER
    name: str = field(init=False)

    def __post_init__(self):
        check_choice("variant", self.variant, VARIANTS)
        self.config = self.config.for_variant(self.variant)
        self.name = self.variant
        self.vocab = vocabulary(self.config)

    def setup(self, device, generator):
        c = self.config
        seed = int(generator.initial_seed())
        gen_cpu = torch.Generator().manual_seed(seed)
        self.model = TopicTransformer(c, self.vocab, gen_cpu, self.dtype).to(device)
        self.device = device
        self.sampler = DocumentSampler(c, self.vocab, seed)
        self.mask_rng = np.random.default_rng(seed + 1)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = (torch.optim.SGD(params, lr=c.lr) if c.optimizer == "sgd"
                    else torch.optim.Adam(params, lr=c.lr))
        self.dataset = None
        if c.n_docs:
            tok, val = self.sampler.sample(c.n_docs)
            masked, sel = mask_batch(tok, val, c, self.vocab, self.mask_rng) if c.masking == "static" else (None, None)
            self.dataset = (tok, val, masked, sel)
        eval_cfg = c.replace(N_max=0, N=min(max(c.N, 1), 100)) if c.data == "tau" else c
        self.eval_docs = DocumentSampler(eval_cfg, self.vocab, seed + 2).sample(32)

    def batch(self):
        c = self.config
        if self.dataset is None:
            tok, val = self.sampler.sample(c.batch)
            masked, sel = mask_batch(tok, val, c, self.vocab, self.mask_rng)
        else:
            idx = self.sampler.rng.integers(0, c.n_docs, size=c.batch)
            tok, val = self.dataset[0][idx], self.dataset[1][idx]
            if c.masking == "static":
                masked, sel = self.dataset[2][idx], self.dataset[3][idx]
            else:
                masked, sel = mask_batch(tok, val, c, self.vocab, self.mask_rng)
        key_ok = val & ~sel if c.keys == "code" else val  # code: selected positions are not keys
        as_t = lambda a: torch.as_tensor(a, device=self.device)  # noqa: E731
        return as_t(masked), as_t(key_ok), as_t(tok), as_t(sel)

    def state_dict(self) -> dict:
        """Model and optimiser (:class:`ModuleState`) plus the data and masking RNG states, so a
        resumed run draws the same batches."""
        return {**super().state_dict(), "sampler_rng": self.sampler.rng.bit_generator.state,
                "mask_rng": self.mask_rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.sampler.rng.bit_generator.state = state["sampler_rng"]
        self.mask_rng.bit_generator.state = state["mask_rng"]

    def step(self, step: int) -> dict[str, float]:
        masked, key_ok, labels, sel = self.batch()
        self.opt.zero_grad(set_to_none=True)
        loss = loss_on_selected(self.model(masked, key_ok), labels, sel, self.config.loss)
        total = loss
        if self.config.lam > 0 and isinstance(self.model.W_V, nn.Parameter):
            total = loss + self.config.lam * (self.model.W_V**2).sum()  # gradient-carrying (§7 bug 1 fixed)
        total.backward()
        self.opt.step()
        return {"loss": float(loss.detach())}

    def value_like_matrix(self) -> np.ndarray:
        """``W_V`` (one-hot) or ``E = W_E^T W_E`` (embedding setting) as numpy."""
        m = self.model
        with torch.no_grad():
            M = m.W_E.T @ m.W_E if self.variant == "embedding" else m.W_V
            return M.detach().cpu().numpy().astype(np.float64)

    def observables(self) -> dict[str, float]:
        m = self.model
        with torch.no_grad():
            obs = {"norm_W_K": float(torch.linalg.norm(m.W_K)), "norm_W_Q": float(torch.linalg.norm(m.W_Q)),
                   "norm_W_V": float(torch.linalg.norm(m.W_V))}
        red = reduced_coordinates(self.value_like_matrix(), m.b.detach().cpu().numpy(), self.vocab.topic_of,
                                  mask_id=self.vocab.mask)
        obs.update(red)
        if self.variant in ("joint", "attention"):
            tok, val = self.eval_docs
            st = attention_statistics(m, tok, val, self.vocab, self.config.v)
            obs["gamma_hat"] = st["gamma_hat"]
        return obs


    def parameters_info(self) -> dict[str, Any]:
        return {**self.config.to_dict(), "variant": self.variant, "D": self.vocab.size,
                "d_a": self.model.d_a, "dtype": str(self.dtype)}




def train(config: TopicConfig, *, variant: str = "stage1", device: str = "auto", seed: int | None = None,
          progress: bool = False, attention_docs: int = 100, checkpoint=None, checkpoint_every: int = 0,
          resume: bool = False):
    """Train one network, logged at ``config.log_steps()``; returns ``(trajectory, experiment)``.
    With trained attention the final attention statistics (``attention_docs`` held-out unmasked
    documents) go into the attrs."""
    exp = TopicExperiment(config, variant=variant)
    seed = config.seed if seed is None else seed
    trainer = Trainer(device=device, seed=seed, progress=progress, checkpoint=checkpoint,
                      checkpoint_every=checkpoint_every, resume=resume)
    traj = trainer.run(exp)
    if exp.config.attention == "trained" and attention_docs:
        tok, val = DocumentSampler(exp.config, exp.vocab, 10_000 + seed).sample(attention_docs)
        for k, x in attention_statistics(exp.model, tok, val, exp.vocab, config.v).items():
            traj.attrs[k] = x
    return traj, exp


def run(config: TopicConfig, *, device: str = "auto", variant: str | None = None, progress: bool = False,
        checkpoint=None, checkpoint_every: int = 0, resume: bool = False):
    """`tdyn train topic`: one run (``variant`` default ``stage1``), returns the trajectory."""
    traj, _ = train(config, variant=variant or "stage1", device=device, progress=progress,
                    checkpoint=checkpoint, checkpoint_every=checkpoint_every, resume=resume)
    return traj
