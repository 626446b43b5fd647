"""JoMA configuration: one frozen Config that owns every variant's settings and the time unit.

Variants (``tdyn train joma --variant V``; spec sections in brackets):

=========  =====================================================================================
fixed      the block (§1.1) under Assumption 1 exactly: loss ``-mean_n sum_k G_nk h_nk`` (the
           objective the block ODE is derived from — a *derivation check*, not evidence)
ce         the official Figs. 2-3 toy: class rows ``x_n = P(. | y = n)``, cross-entropy top
mixture    the headline network (§2.5 Theorem 3's mixture data): finite sequences of ``seq_len``
           tokens drawn from ``P(. | y)``, softmax attention over the positions, tanh/ReLU MLP,
           cross-entropy on the class
probe      the converging one-token-per-class toy of the entropy drop-and-bounce (§2.5)
hblt       the block on HBLT bags, learning order vs LCA height (§3.2-3.4)
hier       the multi-layer Transformer of Table 1 on the random-combination hierarchy (§3.5)
=========  =====================================================================================

Variants and presets use the one mechanism of :class:`theory.ParamsBase`: every field but
``variant`` defaults to ``None`` = "the variant's default" (``VARIANT_DEFAULTS``, ``"*"`` for all
variants), resolved at construction; a setting the variant does not read (``VARIANT_ONLY``, derived
from the per-variant read sets below) moved from its default is a :class:`ConfigError`, so no
override is silently dropped; ``replace(variant=V)`` rebinds the explicit settings to ``V``.
``JomaConfig.preset(name, quick=...)`` builds the named settings of the figures and the comparison
(:data:`JomaConfig.PRESETS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, check_choice
from ..limits import F64, Term, field_value
from ..params import ALL_VARIANTS, ParamsBase, Preset

__all__ = ["estimate", "PAPER", "SPEC", "ATTENTIONS", "ACTIVATIONS", "FIG4_MU", "JomaConfig", "Config"]

PAPER = "joma"
SPEC = "docs/papers/joma.md"
#: attention kernels of spec §1.1 (the ``attention`` setting)
ATTENTIONS = ("linear", "exp", "softmax")
ACTIVATIONS = ("linear", "tanh", "relu")

#: mu of the official Fig. 4 script (torch seed 0, spec §5 Fig. 4).
FIG4_MU = (1.2655, 1.3960, 1.9222, 2.3668, 2.4703, 2.4889, 2.8969, 2.9023, 3.3046, 3.6892)


def _one_row_per_hidden_unit(config: "JomaConfig") -> int:
    """Default ``N``: one class row per hidden unit (``N = K``; the centred G and the CE toy need it)."""
    return config.K


#: every variant's defaults ("*"), then per-variant changes
_VARIANT_DEFAULTS = {
    ALL_VARIANTS: dict(attention="exp", activation="linear", Mc=6, K=3, N=_one_row_per_hidden_unit, d=12,
                       temperature=1.0, data="gaussian", gradient="centred", lr=0.005, steps=2600, log_every=40,
                       init_scale=0.0, batch=1, replacement=True, data_seed=0, seed=0, depth=4, branching=2,
                       rho=0.7, p_top=0.5, hblt_samples=1024, seq_len=8, n_per_class=64, width=32, hidden=40, nlayer=2, wd=1e-4,
                       vocab=20, num_tokens=(8, 4), num_combinations=(2, 2), n_test=256, top="ce"),
    # headline: softmax over positions, tanh MLP, CE; lr 0.5 for 4000 steps -> ODE time 2000
    "mixture": dict(attention="softmax", activation="tanh", Mc=10, K=4, d=16, lr=0.5, steps=4000, log_every=10,
                    seq_len=32),
    "probe": dict(temperature=0.5, lr=0.01, steps=8000, log_every=50),
    "hblt": dict(attention="softmax", lr=1.0, steps=1500, log_every=10),
    "hier": dict(lr=1e-3, steps=150, log_every=10, batch=128, seq_len=16),
}

_BLOCK = {"attention", "activation", "Mc", "K", "N", "d", "temperature", "data", "gradient", "lr", "steps",
          "log_every", "init_scale", "data_seed", "seed"}
#: the settings each variant reads (the source of ``VARIANT_ONLY``)
_READS: dict[str, frozenset] = {
    # batch: the block SDE's minibatch (`tdyn simulate --sde`) and minibatch SGD's (empirical.joma.minibatch),
    # whose rows are drawn with replacement (the SDE's assumption) unless replacement=False
    "fixed": frozenset(_BLOCK | {"batch", "replacement"}),
    "ce": frozenset(_BLOCK - {"gradient"}),  # one class row per hidden unit: N = K
    "mixture": frozenset({"attention", "activation", "Mc", "K", "d", "temperature", "lr", "steps", "log_every",
                          "init_scale", "data", "data_seed", "seed", "seq_len", "n_per_class", "top"}),
    "probe": frozenset({"activation", "temperature", "lr", "steps", "log_every", "seed"}),
    "hblt": frozenset({"attention", "lr", "steps", "log_every", "data_seed", "seed", "depth", "branching", "rho",
                       "p_top", "hblt_samples"}),
    "hier": frozenset({"lr", "steps", "log_every", "seed", "batch", "seq_len", "width", "hidden", "nlayer",
                       "wd", "vocab", "num_tokens", "num_combinations", "n_test"}),
}

#: the official Figs. 2-3 toy (spec §5): Mc = 20 (10 distinct + 10 common), K = 20 classes, d = 30,
#: softmax attention with T = 0.5, W, z ~ N(0, 1)/100, CE, full batch, SGD lr 0.1
_TOY = dict(variant="ce", attention="softmax", Mc=20, K=20, N=20, d=30, temperature=0.5, lr=0.1, log_every=20,
            init_scale=0.01)


@dataclass(frozen=True)
class JomaConfig(ParamsBase):
    """All settings of every JoMA variant (see the module docstring; ``None`` = variant default).

    Block (spec §1.1, §5): ``attention`` kernel (linear / exp / softmax), ``activation`` of the
    MLP, ``Mc`` contextual tokens, ``K`` hidden units, ``N`` class rows ``x_n = P(l | y = n)``
    (default ``K``), embedding dim ``d > Mc``, logit ``temperature``; ``gradient`` ``"centred"`` is
    the stationary ``G = I - 11^T/K`` (needs ``N == K``), ``"random"`` a Gaussian ``G``;
    ``init_scale`` the std of ``W(0), z(0)`` (0 = zero init, ``c = 0``); ``batch`` the SDE's
    minibatch (and hier's); ``replacement`` whether minibatch SGD of the block
    (:mod:`empirical.joma.minibatch`) draws its ``batch`` rows with replacement (the i.i.d. rows the
    SDE's ``Sigma = Cov/B`` assumes) or ``batch`` distinct rows per step. Mixture: ``n_per_class`` sequences of ``seq_len`` tokens per class,
    ``top`` ``"ce"`` (headline) or ``"fixed"`` (loss ``-G(0).h``: the ODE's own objective, a
    derivation check). HBLT: complete ``branching``-ary tree of ``depth``, channel ``(1+rho)/2``,
    top latents on w.p. ``p_top``, ``hblt_samples`` bags. Hier (Table 1): vocabulary ``vocab``,
    length ``seq_len``, latents per level ``num_tokens``, ``num_combinations``, model
    ``width``/``hidden``/``nlayer``, Adam ``lr`` with weight decay ``wd``, ``batch``, ``n_test``
    test sequences.

    **Time unit.** Full-batch SGD with the same learning rate on ``W`` and ``z`` is the Euler
    discretisation of the gradient flow of spec §2.1 with step ``lr``, so an optimiser step maps to
    ODE time ``t = lr * step`` (Decision 3: equal rates keep Theorem 1's constants). ``hier`` trains
    with Adam and has no gradient-flow time: its time is the step.
    """

    VARIANTS = {
        "fixed": "the block under Assumption 1 exactly (loss -G.h: the ODE's own objective, a derivation check)",
        "ce": "the official Figs. 2-3 toy: class rows, cross-entropy top",
        "mixture": "the headline network: token sequences of a class mixture, softmax over positions, CE",
        "probe": "the converging one-token-per-class toy of the entropy drop and bounce",
        "hblt": "the block on HBLT bags: learning order vs LCA height",
        "hier": "the multi-layer Transformer of Table 1 on the random-combination hierarchy (Adam)",
    }
    VARIANT_DEFAULTS = _VARIANT_DEFAULTS
    VARIANT_ONLY = {f: tuple(v for v in _READS if f in _READS[v])
                    for f in _VARIANT_DEFAULTS[ALL_VARIANTS] if not all(f in r for r in _READS.values())}
    PRESETS = {
        "toy": Preset("the official Figs. 2-3 toy (spec §5; 2000 SGD iterations, quick: 1000)",
                      quick=dict(_TOY, steps=1000), full=dict(_TOY, steps=2000)),
        "probe": Preset("the converging toy of the entropy drop and bounce (spec §2.5; Fig. 4's third panel)",
                        quick=dict(variant="probe", steps=4000), full=dict(variant="probe", steps=8000)),
        "headline": Preset("the headline network of `tdyn compare joma` (spec §2.5 mixture data, CE top)",
                           quick=dict(variant="mixture")),
        "hier": Preset("Table 1, scaled down (spec §3.5): 150 Adam steps (full: 600)",
                       quick=dict(variant="hier", steps=150), full=dict(variant="hier", steps=600)),
    }

    variant: str = "fixed"
    attention: str | None = None
    activation: str | None = None
    Mc: int | None = None
    K: int | None = None
    N: int | None = None
    d: int | None = None
    temperature: float | None = None
    data: str | None = None  # "gaussian" or "random" X (spec §5 Fig. 2)
    gradient: str | None = None
    lr: float | None = None
    steps: int | None = None
    log_every: int | None = None
    init_scale: float | None = None
    batch: int | None = None
    replacement: bool | None = None
    data_seed: int | None = None
    seed: int | None = None
    depth: int | None = None
    branching: int | None = None
    rho: float | None = None
    p_top: float | None = None
    hblt_samples: int | None = None
    seq_len: int | None = None
    n_per_class: int | None = None
    width: int | None = None
    hidden: int | None = None
    nlayer: int | None = None
    wd: float | None = None
    vocab: int | None = None
    num_tokens: tuple | None = None
    num_combinations: tuple | None = None
    n_test: int | None = None
    top: str | None = None  # mixture: "ce" (headline) or "fixed" (-G(0).h: derivation check)

    # -- time ------------------------------------------------------------------------------------
    def ode_time(self, step: int | float) -> float:
        """``t = lr * step`` (SGD variants; see the class docstring); ``step`` for ``hier`` (Adam)."""
        return float(step) if self.variant == "hier" else float(step) * float(self.lr)

    # -- validation ------------------------------------------------------------------------------
    def validate(self) -> None:
        for name in ("num_tokens", "num_combinations"):  # integers (JSON and --set may give 8.0)
            values = getattr(self, name)
            if not isinstance(values, (list, tuple)) or any(v != int(v) for v in values):
                raise ConfigError(name, f"expected a list of integers, got {values!r}")
            object.__setattr__(self, name, tuple(int(v) for v in values))
            if any(v < 1 for v in getattr(self, name)):
                raise ConfigError(name, f"every level needs >= 1, got {list(getattr(self, name))}")
        check_choice("attention", self.attention, ATTENTIONS)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("data", self.data, ("gaussian", "random"))
        check_choice("gradient", self.gradient, ("centred", "random"))
        check_choice("top", self.top, ("ce", "fixed"))
        for name in ("Mc", "K", "N", "steps", "log_every", "batch", "hblt_samples", "seq_len", "n_per_class",
                     "width", "hidden", "nlayer", "n_test"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        for name in ("temperature", "lr"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(name, f"must be a finite number > 0, got {v}")
        for name in ("init_scale", "wd"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(name, f"must be a finite number >= 0, got {v}")
        if self.depth < 1:
            raise ConfigError("depth", f"HBLT tree depth must be >= 1, got {self.depth}")
        if self.branching < 2:
            raise ConfigError("branching", f"must be >= 2, got {self.branching}")
        for name in ("rho", "p_top"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0 <= v <= 1):
                raise ConfigError(name, f"probability must lie in [0, 1], got {v}")
        if self.vocab < 2:
            raise ConfigError("vocab", f"needs >= 2 tokens (one is padding), got {self.vocab}")
        if len(self.num_tokens) != len(self.num_combinations) or not self.num_tokens:
            raise ConfigError("num_combinations", "needs one entry per level of num_tokens")
        self._validate_variant()

    def _validate_variant(self) -> None:
        """Cross-field constraints of the bound variant only (others' fields are not read)."""
        v = self.variant
        if v in ("fixed", "ce", "mixture") and self.d < self.Mc + 1:
            raise ConfigError("d", f"embedding dim must be >= Mc + 1 = {self.Mc + 1} (orthonormal tokens), got {self.d}")
        if v == "fixed" and self.gradient == "centred" and self.N != self.K:
            raise ConfigError("N", f"the centred gradient G = I - 11^T/K needs N == K, got N={self.N}, K={self.K}")
        if v == "ce" and self.N != self.K:
            raise ConfigError("N", f"the CE toy has one class row per hidden unit (N == K), got N={self.N}, K={self.K}")
        if v in ("fixed", "ce") and self.attention == "linear" and self.init_scale == 0:
            raise ConfigError("init_scale", "linear attention with zero init is a fixed point (Decision 5); use > 0")
        if v == "mixture" and self.attention != "softmax":
            raise ConfigError("attention", "the mixture network attends over positions with softmax")
        if v == "hblt" and self.attention == "linear":
            raise ConfigError("attention", "HBLT block uses exp or softmax attention "
                                           "(linear + zero init does not move)")
        if v == "hier":
            self._validate_hierarchy()
        if v == "hier" and int(np.prod(self.num_combinations)) > self.seq_len:
            raise ConfigError("seq_len", f"sequence length {self.seq_len} < max number of leaf tokens "
                                         f"{int(np.prod(self.num_combinations))}")

    def _validate_hierarchy(self) -> None:
        """Each latent of level ``i+1`` is a distinct subset of ``num_combinations[i]`` of the
        ``num_tokens[i-1]`` latents below (``vocab - 1`` tokens at level 0, spec §3.5): the level must
        have that many latents to choose from and at most that many distinct subsets."""
        below = self.vocab - 1
        for i, (n, k) in enumerate(zip(self.num_tokens, self.num_combinations)):
            if k > below:
                raise ConfigError("num_combinations", f"level {i + 1} combines {k} of only {below} latents below")
            if n > math.comb(below, k):
                raise ConfigError("num_tokens", f"level {i + 1} asks for {n} distinct subsets of {k} of {below} "
                                                f"latents; only {math.comb(below, k)} exist")
            below = n


Config = JomaConfig


def _train_memory(c) -> list[Term]:
    """Memory terms of one training run of ``c.variant`` (bytes; float64 unless noted): the arrays
    its experiment (:mod:`empirical.joma.experiment`) builds, the tensors it trains (parameters,
    gradients, the update's state, the forward's intermediates) and its logged observables (a
    Python float per value and point while logging: ~16 x 8 bytes)."""
    v = getattr(c, "variant", "fixed")
    Mc, K, N, d = (field_value(c, k, 1) for k in ("Mc", "K", "N", "d"))
    points = field_value(c, "steps", 1) / max(field_value(c, "log_every", 1), 1) + 2
    big = lambda *named: max(named, key=lambda kv: kv[1])[0]  # noqa: E731 - the field of the largest size
    if v in ("fixed", "ce"):
        logged = 3 * Mc + K + (K * Mc if K * Mc <= 64 else Mc)
        return [Term("memory", 3 * F64 * K * K, "K"),  # the centred G = I - 11^T/K (eye, ones, result)
                Term("memory", 8 * F64 * N * K, big(("K", K), ("N", N))),  # G, h and their gradients
                Term("memory", 4 * F64 * N * Mc, big(("N", N), ("Mc", Mc))),  # X and its tensor, attention
                Term("memory", 8 * F64 * d * (K + Mc + 1), big(("d", d), ("K", K), ("Mc", Mc))),  # W, U, copies
                Term("memory", 16 * F64 * points * logged, "steps")]
    if v == "mixture":
        npc, L = field_value(c, "n_per_class", 1), field_value(c, "seq_len", 1)
        n, n_field = K * npc, big(("K", K), ("n_per_class", npc))  # n = K * n_per_class sequences
        return [Term("memory", n * L * K + 4 * F64 * n * L, big(("K", K), ("n_per_class", npc), ("seq_len", L))),
                # ^ the token draw: an (n, seq_len, K) comparison with the cumulative class rows
                Term("memory", 8 * F64 * n * K, n_field),  # cum[labels], h, G(0), gradient rows, softmax
                Term("memory", 2 * F64 * K * K, "K"),
                Term("memory", 4 * F64 * n * Mc, big(("Mc", Mc), (n_field, n))),  # X, bags b and grads
                Term("memory", 8 * F64 * d * (K + Mc + 1), big(("d", d), ("K", K), ("Mc", Mc))),
                Term("memory", 16 * F64 * points * (3 * Mc + K * Mc + K), big(("K", K), ("Mc", Mc)))]
    if v == "hblt":
        S = field_value(c, "hblt_samples", 1)
        leaves = min(field_value(c, "branching", 2) ** min(field_value(c, "depth", 1), 1000.0), 1e300)
        lf = big(("depth", leaves), ("hblt_samples", S))
        return [Term("memory", 10 * F64 * S * leaves, lf),  # draws, tree copies, bags (X), its tensor, forward
                Term("memory", 8 * F64 * leaves + 16 * F64 * points * 2 * leaves, "depth")]  # z, v, logged
    if v == "hier":
        w, h, nl = (field_value(c, k, 1) for k in ("width", "hidden", "nlayer"))
        B, L, n_test, M = (field_value(c, k, 1) for k in ("batch", "seq_len", "n_test", "vocab"))
        levels = sum(float(x) for x in (getattr(c, "num_tokens", None) or (1,)))
        f32 = F64 / 2
        params = M * w + nl * (3 * w * w + 2 * w * h + h + 6 * w) + w * levels + levels
        pf = big(("width", w * max(w, levels)), ("hidden", w * h), ("vocab", M * w), ("nlayer", nl * nl))
        act = (B + n_test) * L * nl * (10 * w + 3 * h + 3 * L)  # activations kept for backward (and the test batch)
        af = big(("batch", B), ("n_test", n_test), ("seq_len", L * L / max(w + h, 1)), ("width", w), ("hidden", h),
                 ("nlayer", nl))
        return [Term("memory", 5 * f32 * params, pf),  # weights, gradients, Adam's two moments, update
                Term("memory", 2 * f32 * act, af),
                Term("memory", F64 * (B + n_test) * (L + 2 * levels), big(("batch", B), ("n_test", n_test)))]
    return []  # probe: ten tokens, one hidden unit


def estimate(c, command: str, paths: int) -> list[Term]:
    """Resource terms of ``command`` for this paper (the paper row's ``estimate`` slot; see
    :mod:`theory.limits`): the fields that size its arrays and symbolic systems (training: every
    variant's arrays, :func:`_train_memory`)."""
    Mc, K, N, d, B = (field_value(c, k, 1) for k in ("Mc", "K", "N", "d", "batch"))
    big_mc = "Mc" if Mc >= d else "d"
    terms = [Term("memory", 4 * F64 * (N + Mc) * d, big_mc), Term("memory", 4 * F64 * d * K, "d")]
    if command in ("derive", "simulate", "sde"):
        terms.append(Term("memory", 3 * F64 * K * K, "K"))  # the centred G
        terms.append(Term("symbolic_states", Mc * K + K * N + Mc, "Mc" if Mc >= N else "N"))  # block + Theorem 2
    if command == "sde":
        terms.append(Term("memory", F64 * paths * (Mc * K + K * N) * max(B, 1) * 4, "Mc"))
    if command == "train":
        terms += _train_memory(c)
    return terms
