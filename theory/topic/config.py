"""``TopicConfig``: data, masking, model, optimiser and variant settings of one topic-model run
(spec ``docs/papers/topic.md`` §1, §2, §8 Decisions), and the paper's time convention.

Time (the one place it is stated): **one unit of ODE time is one optimiser step**. The derived
flows carry the learning rate in their right-hand side (``eta = lr``), so the gradient-flow time
``lr * step`` of spec §6 is the ODE time ``step`` of a system integrated with ``eta = lr``:
:meth:`TopicConfig.ode_time` is the identity on steps. This holds for plain SGD on the mean loss
over the selected positions (Adam rescales the gradient and has no such map).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError, check_choice
from ..limits import F64, Term, field_value
from ..params import ParamsBase, Preset

__all__ = ["estimate", "PAPER", "SPEC", "KEY_VARIANTS", "VARIANTS", "TopicConfig", "Config"]

PAPER = "topic"
SPEC = "docs/papers/topic.md"
KEY_VARIANTS = ("theory", "code")

#: shared settings of the two-stage presets (quick and full differ in N, batch, steps)
_TWO_STAGE = dict(variant="joint", T=3, v=2, tau=2, p_m=0.3, p_c=0.5, p_r=0.3, keys="code", lr=0.5, log_every=20,
                  init_scale=0.02)
#: shared settings of the attention-table presets (spec §5.6; LDA T = v = 10, N in [100, 150])
_TABLE = dict(variant="joint", T=10, v=10, data="lda", alpha=0.1, N=100, N_max=150, vocab="code", keys="code",
              random_ids="all", loss="ce", p_m=0.15, p_c=0.1, p_r=0.1, init_scale=1 / math.sqrt(3 * 104),
              masking="static")


@dataclass(frozen=True)
class TopicConfig(ParamsBase):
    """Data, masking, model and optimiser of one topic-model run.

    Sizes: ``T`` topics of ``v`` words, ``tau`` topics per document, documents of ``N`` tokens
    (``N_max > N``: length uniform in ``[N, N_max]``). Masking ``p_m, p_c, p_r`` (spec §1.2).
    Time: ODE time = optimiser step, with ``eta = lr`` inside the flow (module docstring).

    ``variant`` (``tdyn train topic --variant``) picks the freeze pattern (:data:`VARIANTS`): each
    imposes ``attention`` / ``value`` / ``embedding`` (``VARIANT_FIXED``; the ``attention`` variant
    freezes ``W_V`` at the block matrix unless ``value="identity"``), and a setting the variant
    never reads (``VARIANT_ONLY``) moved from its default is a :class:`ConfigError`. Learning
    rates: ``lr`` for ``W_V`` and ``b``, ``kq_lr_ratio * lr`` for ``W_K``, ``W_Q`` (the two-stage
    map's axis: the paper's "carefully chosen initialization and learning rate"). Presets
    (``TopicConfig.preset(name, quick=...)``): the runs of ``tdyn compare topic`` and the figures.
    """

    VARIANTS = {
        "stage1": "uniform attention, one-hot, W_V trained (the stage-1 theorem setting, spec §3.2)",
        "joint": "W_K, W_Q, W_V trained together from small init (two stages, spec §3.4)",
        "attention": "W_V frozen (block or identity matrix), attention trained (stage 2, spec §3.3)",
        "embedding": "W_V = I frozen, uniform attention, W_E trained (spec §3.1)",
    }
    VARIANT_FIXED = {
        "stage1": {"attention": "uniform", "value": "trained", "embedding": "one_hot"},
        "joint": {"attention": "trained", "value": "trained", "embedding": "one_hot"},
        "attention": {"attention": "trained", "embedding": "one_hot"},
        "embedding": {"attention": "uniform", "value": "identity", "embedding": "trained"},
    }
    VARIANT_DEFAULTS = {"*": {"value": "trained"}, "attention": {"value": "block"}}
    VARIANT_ONLY = {
        "kq_init_scale": ("joint", "attention"),
        "d_a": ("joint", "attention"),
        "embedding_init": ("embedding",),
        "lam": ("stage1", "joint"),  # the penalty acts on a trained W_V
        "kq_lr_ratio": ("joint", "attention"),
    }
    PRESETS = {
        "stage1": Preset(
            "stage 1 inside the theory's assumptions (compare's observables, spec §3.5): squared loss, "
            "uniform attention, one-hot, long documents, plain SGD with a small learning rate",
            quick=dict(T=5, v=4, tau=2, N=200, batch=32, lr=0.5, steps=600, log_every=20),
            full=dict(T=10, v=10, tau=2, N=1000, batch=128, lr=0.5, steps=3000, log_every=50)),
        "two_stage": Preset(
            "joint K/Q/V training from small init (compare's claims, spec §3.4, §3.6): code key mask (no "
            "own-position leakage at finite N), larger p_c so that the stage-2 gradient is not tiny, d_a = D",
            quick=dict(_TWO_STAGE, N=48, batch=16, steps=1000),
            full=dict(_TWO_STAGE, N=128, batch=32, steps=3000)),
        "attention_table": Preset(
            "the paper's attention table setting (spec §5.6): official LDA data, code vocabulary and "
            "masking, CE, joint training; one row per optimiser and learning rate",
            quick=dict(_TABLE, n_docs=200, batch=8, steps=40, log_every=40),
            full=dict(_TABLE, n_docs=10_000, batch=40, steps=5000, log_every=5000)),
        "gamma_star": Preset("the stage-2 gamma* grid over T and tau (spec §3.6): words per topic",
                             quick=dict(v=5), full=dict(v=10)),
    }

    variant: str = "stage1"
    T: int = 10
    v: int = 10
    tau: int = 2
    N: int = 500
    N_max: int = 0  # 0: every document has N tokens
    data: str = "tau"  # "tau" (theory, spec §1.1) or "lda" (Dir(alpha), spec §1.3)
    alpha: float = 0.1
    p_m: float = 0.15
    p_c: float = 0.1
    p_r: float = 0.1
    keys: str = "theory"  # selected positions are keys ("theory") or not ("code")
    random_ids: str = "words"  # random replacement among words (theory) or all ids (code parity)
    masking: str = "dynamic"  # "dynamic" (fresh every step) or "static" (drawn once per document)
    vocab: str = "theory"  # "theory": Tv words + MASK; "code": PAD, MASK, START, END + words
    lam: float = 0.0  # weight decay lambda ||W_V||_F^2 (gradient-carrying; spec §8 Decision 8)
    loss: str = "squared"  # "squared" (sum over vocabulary) or "ce"
    attention: str = "uniform"  # "uniform" (W_K = W_Q = 0 frozen) or "trained"
    value: str | None = None  # "trained"; frozen "identity", "block" or "optimum"; None: the variant's default
    embedding: str = "one_hot"  # "one_hot" or "trained" (tied W_pred = W_E^T)
    embedding_init: str = "gaussian"  # trained W_E: N(0, init_scale^2) or "identity" (init_scale * I)
    d_a: int = 0  # K/Q dimension; 0 -> vocabulary size D (spec §8 Decision 11)
    optimizer: str = "sgd"  # "sgd" (no momentum) or "adam"
    lr: float = 0.2
    kq_lr_ratio: float = 1.0  # learning rate of W_K, W_Q over that of W_V (and b): lr_KQ = kq_lr_ratio * lr
    batch: int = 64
    steps: int = 500
    log_every: int = 10
    init_scale: float = 0.0  # std of the zero-mean Gaussian init of W_V (and W_K, W_Q)
    kq_init_scale: float = -1.0  # std for W_K, W_Q; < 0 -> init_scale
    n_docs: int = 0  # 0: fresh documents every step; > 0: a fixed training set of that many
    seed: int = 0

    def validate(self) -> None:
        for name, lo in (("T", 1), ("v", 2), ("tau", 1), ("N", 1), ("batch", 1), ("steps", 1),
                         ("log_every", 1)):
            val = getattr(self, name)
            if val < lo:
                raise ConfigError(name, f"must be >= {lo}, got {val}")
        if self.tau > self.T:
            raise ConfigError("tau", f"topics per document tau={self.tau} exceeds the number of topics T={self.T}")
        if self.N_max and self.N_max < self.N:
            raise ConfigError("N_max", f"must be 0 or >= N={self.N}, got {self.N_max}")
        for name in ("p_m", "p_c", "p_r"):
            val = getattr(self, name)
            if not (math.isfinite(val) and 0 <= val <= 1):
                raise ConfigError(name, f"must be a probability in [0, 1], got {val}")
        if self.p_m == 0:
            raise ConfigError("p_m", "must be > 0 (no position would be selected)")
        if self.p_c + self.p_r > 1 + 1e-12:
            raise ConfigError("p_r", f"p_c + p_r = {self.p_c + self.p_r:g} exceeds 1")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise ConfigError("alpha", f"Dirichlet concentration must be > 0, got {self.alpha}")
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise ConfigError("lam", f"weight decay must be >= 0, got {self.lam}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError("lr", f"learning rate must be a finite number > 0, got {self.lr}")
        if not (math.isfinite(self.kq_lr_ratio) and self.kq_lr_ratio > 0):
            raise ConfigError("kq_lr_ratio", f"must be a finite number > 0, got {self.kq_lr_ratio}")
        if not (math.isfinite(self.init_scale) and self.init_scale >= 0):
            raise ConfigError("init_scale", f"must be >= 0, got {self.init_scale}")
        if not math.isfinite(self.kq_init_scale):
            raise ConfigError("kq_init_scale", "must be finite")
        if self.d_a < 0:
            raise ConfigError("d_a", f"must be >= 0, got {self.d_a}")
        if self.n_docs < 0:
            raise ConfigError("n_docs", f"must be >= 0, got {self.n_docs}")
        for name, allowed in (
            ("data", ("tau", "lda")), ("keys", KEY_VARIANTS), ("random_ids", ("words", "all")),
            ("masking", ("dynamic", "static")), ("vocab", ("theory", "code")),
            ("loss", ("squared", "ce")), ("attention", ("uniform", "trained")),
            ("value", ("trained", "identity", "block", "optimum")), ("embedding", ("one_hot", "trained")),
            ("optimizer", ("sgd", "adam")), ("embedding_init", ("gaussian", "identity")),
        ):
            check_choice(name, getattr(self, name), allowed)
        if self.masking == "static" and self.n_docs == 0:
            raise ConfigError("masking", "static masking needs a fixed training set (n_docs > 0)")
        if self.variant == "attention" and self.value == "trained":
            raise ConfigError("value", "variant 'attention' freezes W_V: value must be 'block', 'identity' or 'optimum'")
        if self.value == "optimum" and self.vocab != "theory":
            raise ConfigError("value", "W_V frozen at the stage-1 optimum needs the theory vocabulary (vocab='theory')")

    # -- time (module docstring) ---------------------------------------------------------------
    def ode_time(self, step: int | float) -> float:
        """ODE time of optimiser step ``step``: the step itself (``eta = lr`` sits in the flow)."""
        return float(step)

    @property
    def n_words(self) -> int:
        return self.T * self.v

    @property
    def kq_scale(self) -> float:
        return self.init_scale if self.kq_init_scale < 0 else self.kq_init_scale


Config = TopicConfig

#: Training variants (``tdyn train topic --variant``), in the order the paper row lists them.
VARIANTS = tuple(TopicConfig.VARIANTS)


def estimate(c, command: str, paths: int) -> list[Term]:
    """Resource terms of ``command`` for this paper (the paper row's ``estimate`` slot; see
    :mod:`theory.limits`): the fields that size its arrays and symbolic systems."""
    D = field_value(c, "T", 10) * field_value(c, "v", 10) + 4  # vocabulary (+ MASK and the code's specials)
    n_tok, B = max(field_value(c, "N", 1), field_value(c, "N_max", 0)), field_value(c, "batch", 1)
    terms = [Term("memory", 4 * F64 * D * D, "v" if field_value(c, "v") > field_value(c, "T") else "T")]
    if command == "sde":  # the ensemble's states (D x (T + 2) numbers per path and logged time), and its work
        n_log = field_value(c, "steps", 1) / max(field_value(c, "log_every", 1), 1) + 2
        r = field_value(c, "T", 10) + 2
        terms += [Term("memory", 2 * F64 * paths * n_log * D * r, "T"),
                  Term("memory", 4 * F64 * D * r * math.comb(int(min(field_value(c, "T", 10), 60)),
                                                           int(min(field_value(c, "tau", 2), 30))) * field_value(c, "v", 10),
                       "tau")]
    if command == "train":
        terms += _train_memory(c, D)
    return terms


def _train_memory(c, D: float) -> list[Term]:
    """Memory terms of one training run (:mod:`empirical.topic`; bytes, float64) beyond the
    ``D x D`` matrices: ``W_K, W_Q`` (``d_a x D``, zero buffers under uniform attention; trained:
    with gradients, the update's state and the per-token keys/queries ``d_a x B x L``), the
    forward's ``B x D x L`` outputs (``B x D`` under uniform attention), the ``B x L x L`` scores
    of trained attention (and of the final statistics on 100 documents of 100 tokens), the sampled
    documents and a fixed training set of ``n_docs``."""
    d_field = "v" if field_value(c, "v") > field_value(c, "T") else "T"
    d_a = field_value(c, "d_a") or D
    L = max(field_value(c, "N", 1), field_value(c, "N_max", 0)) + 2  # + START / END (code vocabulary)
    B = field_value(c, "batch", 1)
    trained = getattr(c, "attention", "uniform") == "trained"
    a_field = "d_a" if d_a > D else d_field
    bl_field = "batch" if B > L else "N"
    terms = [Term("memory", 10 * F64 * D * D, d_field),  # W_V or W_E: gradients, state, E, W_V E, the update
             Term("memory", (10 if trained else 2) * F64 * d_a * D, a_field),
             Term("memory", F64 * B * L * 8, bl_field),  # draws, tokens, masks
             Term("memory", 3 * F64 * field_value(c, "n_docs") * L, "n_docs")]
    if trained:
        terms += [Term("memory", 6 * F64 * d_a * (B * L + 100**2), a_field if d_a > D else bl_field),
                  Term("memory", 5 * F64 * B * D * L, bl_field if B * L > D else d_field),
                  Term("memory", 4 * F64 * (B * L * L + 100**3), "N")]  # scores; final statistics (100 docs)
    else:
        terms.append(Term("memory", 5 * F64 * B * (D + L), bl_field if B > D else d_field))
    return terms
