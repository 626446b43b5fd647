"""Scan & Snap configuration and data layout (spec ``docs/papers/scan_snap.md`` §1.4, §2.3, §8).

:class:`ScanSnapConfig` owns every setting of every variant (data generator, model, optimiser,
closed-form inputs), the variants (the data paths), the presets (the theory's regime, the official
Fig. 4 and Fig. 6 settings, ...) and the paper's **time convention**
(:meth:`ScanSnapConfig.ode_time`); :func:`make_task` builds the concrete instance of the official
generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..limits import F64, Term, field_value
from ..params import ParamsBase, Preset

__all__ = ["estimate", "PAPER", "SPEC", "ScanSnapConfig", "Config", "ScanSnapTask", "make_task"]

PAPER = "scan-snap"
SPEC = "docs/papers/scan_snap.md"

#: the theory's regime (compare's observables): Syn-Small, zero init, plain SGD (t = step), large
#: batch, long sequences (count vectors: cost independent of T), eta_Y = eta_Z = 1
_THEORY = dict(eta_Y=1.0, eta_Z=1.0, momentum=0.0, T=4096, log_every=5, zero_init=True, variant="counts", seed=0)
#: the official Fig. 4 run (spec §5.3): T = 128, batch 128, SGD momentum 0.9, zero init, lr 1
_OFFICIAL = {**_THEORY, "batch": 128, "T": 128, "momentum": 0.9}


@dataclass(frozen=True)
class ScanSnapConfig(ParamsBase):
    """Data generator (official ``Dataset2`` fields), model/optimiser and closed-form inputs.

    Data: ``num_last`` query tokens, ``num_next_per_last`` classes per query (``K = num_last *
    num_next_per_last``); Syn-Small is ``num_last=2, num_next_per_last=1``; Syn-Medium is
    ``num_next_per_last=2``. ``vocab="code"`` uses the official output vocabulary ``M_code``;
    ``"paper"`` the ``num_common + K num_unique_per_next`` contextual tokens (Decision 3). ``T`` is
    the sequence length L (``T - 1`` contextual tokens + the query).

    Training: ``optimizer`` ``sgd`` (PyTorch heavy ball, ``momentum`` mu) or ``adam`` (``beta1 =
    momentum``, ``beta2 = 0.999``: the official Adam has the PyTorch defaults 0.9/0.999, i.e. the
    default ``momentum``); ``batch``, ``steps``, logging every ``log_every`` steps; ``zero_init``
    (spec §2.3) or PyTorch's default init; ``seed``.

    **Variants** (:attr:`VARIANTS`) are the data paths of training (spec §1.3): ``counts`` (exact
    count vectors) or ``sequences`` (token ids, as the official code); they read the same settings.
    **Presets** (:attr:`PRESETS`, :meth:`preset`): ``theory`` (inside the theory's regime),
    ``official`` (the official Fig. 4 run), ``fig6`` (a run of the Fig. 6 sweep), ``spread`` (the
    T = inf flow of the invariant-spread figure).

    ``extra_vocab``: output tokens that never occur in a sequence (neither context nor next token),
    as a large vocabulary has: they enlarge the decoder's softmax, i.e. the paper's ``M`` (Theorem 1
    needs ``M >> 100``; Syn-Small's ``M = 34`` does not, Figs. 3 and 8 use ``M = 1000``), and nothing
    else (``vocab="code"`` only).

    Theory: ``M`` (0 = ``M_out``) and ``C0`` are the closed forms' vocabulary size and constant;
    ``class_weights`` ``uniform`` (pi_n = 1/K on z, Decision 2) or ``literal`` (Eqn. 10 as printed).

    **Time unit** (Decision 2): the ODEs run in *per-sample time* ``t`` with class weights
    ``pi_n = 1/K``; one optimiser step on a batch-mean gradient with learning rate ``eta`` is one
    unit of the ``eta``-scaled gradient flow, and heavy-ball momentum ``mu`` multiplies the
    effective step by ``1/(1 - mu)`` in slowly varying regimes, so ``ode_time(step) = step /
    (1 - momentum)`` for SGD. Adam normalises the step size; its time is ``step`` (no flow claim).
    """

    num_last: int = 2
    num_next_per_last: int = 1
    num_common: int = 10
    num_unique_per_next: int = 10
    common_prob: float = 1.0
    unique_min: float = 0.1
    unique_max: float = 1.0
    vocab: str = "code"
    T: int = 128
    eta_Y: float = 1.0
    eta_Z: float = 1.0
    optimizer: str = "sgd"  # or "adam"
    momentum: float = 0.9
    batch: int = 128
    steps: int = 100
    log_every: int = 2
    zero_init: bool = True
    variant: str = "counts"
    seed: int = 0
    M: int = 0
    C0: float = 1.0
    class_weights: str = "uniform"  # "uniform": pi_n = 1/K on z (Decision 2); "literal": Eqn. 10 as printed
    extra_vocab: int = 0

    VARIANTS = {
        "counts": "exact count vectors q ~ Multinomial(T - 1, P(.|n)) (spec §1.3): cost independent of T",
        "sequences": "T - 1 i.i.d. token ids per sample and attention over positions, as the official code",
    }
    PRESETS = {
        "theory": Preset("inside the theory's regime (compare's observables): Syn-Small, zero init, plain SGD "
                         "(t = step), batch 1024 (full 4096), T = 4096 count vectors, eta_Y = eta_Z = 1, "
                         "100 (full 300) steps",
                         quick={**_THEORY, "batch": 1024, "steps": 100},
                         full={**_THEORY, "batch": 4096, "steps": 300}),
        "official": Preset("the official Fig. 4 run (spec §5.3): Syn-Small, T = 128, batch 128, SGD momentum 0.9, "
                           "zero init, eta_Y = eta_Z = 1, 50 (full 100) steps",
                           quick={**_OFFICIAL, "steps": 50}, full={**_OFFICIAL, "steps": 100}),
        "fig6": Preset("a run of the official Fig. 6 sweep (spec §5.4): Syn-Medium (two classes per query), "
                       "SGD momentum 0.9, batch 128, T = 128, 100 steps, PyTorch's default init; num_last, "
                       "eta_Z, eta_Y and seed are set per cell",
                       quick=dict(num_next_per_last=2, momentum=0.9, batch=128, T=128, steps=100, log_every=100,
                                  zero_init=False)),
        "spread": Preset("the T = inf flow of the invariant-spread figure: Syn-Small, zero init, per-sample time "
                         "t = step (momentum 0), horizon 150 (full 300)",
                         quick=dict(momentum=0.0, steps=150, log_every=150),
                         full=dict(momentum=0.0, steps=300, log_every=300)),
    }

    @property
    def K(self) -> int:
        return self.num_last * self.num_next_per_last

    @property
    def M_out(self) -> int:
        ctx = self.num_common + self.K * self.num_unique_per_next
        return ctx + self.num_last + self.K + self.extra_vocab if self.vocab == "code" else ctx

    @property
    def M_theory(self) -> int:
        return self.M or self.M_out

    def ode_time(self, step: int | float) -> float:
        """Per-sample ODE time of optimiser step ``step``: ``step / (1 - momentum)`` for SGD,
        ``step`` for Adam (see the class docstring)."""
        mu = self.momentum if self.optimizer == "sgd" else 0.0
        return float(step) / (1.0 - mu)

    def validate(self) -> None:
        for name in ("num_last", "num_next_per_last"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.num_common < 0:
            raise ConfigError("num_common", f"must be >= 0, got {self.num_common}")
        if self.num_unique_per_next < 1:
            raise ConfigError("num_unique_per_next",
                              "every class needs >= 1 distinct token (DT entropy, Theorem 2), got "
                              f"{self.num_unique_per_next}")
        if self.num_common > 0 and not (math.isfinite(self.common_prob) and self.common_prob > 0):
            raise ConfigError("common_prob", f"must be a finite number > 0, got {self.common_prob}")
        if not (math.isfinite(self.unique_min) and self.unique_min > 0):
            raise ConfigError("unique_min", f"must be > 0 (else the support is smaller than stated), got {self.unique_min}")
        if not (math.isfinite(self.unique_max) and self.unique_max >= self.unique_min):
            raise ConfigError("unique_max", f"must be >= unique_min={self.unique_min}, got {self.unique_max}")
        if self.vocab not in ("code", "paper"):
            raise ConfigError("vocab", f"must be 'code' or 'paper', got {self.vocab!r}")
        if self.T < 2:
            raise ConfigError("T", f"sequence length must be >= 2 (one contextual token + the query), got {self.T}")
        for name in ("eta_Y", "eta_Z", "C0"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(name, f"must be a finite number > 0, got {v}")
        if self.optimizer not in ("sgd", "adam"):
            raise ConfigError("optimizer", f"must be 'sgd' or 'adam', got {self.optimizer!r}")
        if not (0 <= self.momentum < 1):
            raise ConfigError("momentum", f"must be in [0, 1), got {self.momentum}")
        for name in ("batch", "steps", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.class_weights not in ("uniform", "literal"):
            raise ConfigError("class_weights", f"must be 'uniform' or 'literal', got {self.class_weights!r}")
        if self.extra_vocab < 0 or (self.extra_vocab and self.vocab != "code"):
            raise ConfigError("extra_vocab", f"must be >= 0 and needs vocab='code', got {self.extra_vocab}")
        if self.M < 0:
            raise ConfigError("M", f"must be >= 0 (0 = output vocabulary size), got {self.M}")
        if self.M_theory < 2:
            raise ConfigError("M", f"vocabulary size must be >= 2, got {self.M_theory}")
        if self.K > self.M_theory:
            raise ConfigError("M", f"K={self.K} classes exceed the vocabulary size M={self.M_theory}")


Config = ScanSnapConfig


@dataclass(frozen=True, eq=False)
class ScanSnapTask:
    """A concrete instance of the official generator (spec §1.4), shapes:

    ``P`` (K, M_in): row n = P(.|n) over input token ids; ``query`` (K,): input id of psi(n);
    ``query_index`` (K,): 0..num_last-1; ``label`` (K,): output id of next token n;
    ``dt`` (K, U) distinct-token ids of each class; ``common`` (C,) common ids.
    """

    config: ScanSnapConfig
    P: np.ndarray
    query: np.ndarray
    query_index: np.ndarray
    label: np.ndarray
    dt: np.ndarray
    common: np.ndarray
    M_in: int
    M_out: int

    @property
    def K(self) -> int:
        return self.P.shape[0]

    @property
    def num_last(self) -> int:
        return self.config.num_last

    def support(self, n: int) -> np.ndarray:
        return np.nonzero(self.P[n] > 0)[0]

    def query_support(self, m: int) -> np.ndarray:
        """Union of supports of the classes with psi(n) = query m (the moving entries of z_m)."""
        return np.nonzero(self.P[self.query_index == m].sum(0) > 0)[0]

    @property
    def union_support(self) -> np.ndarray:
        return np.nonzero(self.P.sum(0) > 0)[0]


def make_task(config: ScanSnapConfig) -> ScanSnapTask:
    """Official token layout (spec §1.4): common 0..C-1; distinct ``C + U j .. C + U (j+1) - 1``
    for class j; query tokens ``C + U K + m``; next tokens after the queries. Class ``n`` has query
    ``n // num_next_per_last``. With ``vocab="paper"`` the output vocabulary is the contextual
    tokens and label ``n`` is output id ``n``."""
    C, U, K = config.num_common, config.num_unique_per_next, config.K
    ctx = C + U * K
    M_in = ctx + config.num_last + K
    P = np.zeros((K, M_in))
    dt = np.zeros((K, U), dtype=np.int64)
    uniq = np.linspace(config.unique_min, config.unique_max, U)
    for n in range(K):
        P[n, :C] = config.common_prob
        dt[n] = C + U * n + np.arange(U)
        P[n, dt[n]] = uniq
        P[n] /= P[n].sum()
    qi = np.arange(K) // config.num_next_per_last
    query = ctx + qi
    label = (ctx + config.num_last + np.arange(K)) if config.vocab == "code" else np.arange(K)
    return ScanSnapTask(config=config, P=P, query=query, query_index=qi, label=label, dt=dt,
                        common=np.arange(C), M_in=M_in, M_out=config.M_out)


def estimate(c, command: str, paths: int) -> list[Term]:
    """Resource terms of ``command`` for this paper (the paper row's ``estimate`` slot; see
    :mod:`theory.limits`): the fields that size its arrays and symbolic systems."""
    U, C = field_value(c, "num_unique_per_next", 1), field_value(c, "num_common", 0)
    K = field_value(c, "num_last", 1) * field_value(c, "num_next_per_last", 1)
    M_in = C + K * U + field_value(c, "num_last", 1) + K
    B, T = field_value(c, "batch", 1), field_value(c, "T", 1)
    big = "num_common" if C >= K * U else "num_unique_per_next"
    terms = [Term("memory", 20 * F64 * M_in * M_in, big),  # Y, Z, gradients, the update, task P, copies
             Term("memory", 2 * F64 * K * M_in, big)]
    if command in ("derive", "simulate"):
        terms.append(Term("symbolic_states", 4 * U + 3, "num_unique_per_next"))  # SymmetricLayout
    if command == "train":
        terms += [Term("memory", 4 * F64 * B * M_in, "batch" if B > M_in else big),
                  Term("memory", (2 * F64 * B * T) if getattr(c, "variant", "counts") == "sequences" else 0.0, "T")]
    return terms
