"""SCB configuration and task instance (docs/papers/scb.md §1.2, §2, §8 Decisions).

:class:`SCBConfig` owns every setting of every variant (the theory, the three training variants
and the transfer task) and SCB's **time convention**; :func:`make_task` draws the instance
(``P``, ``mu``, ``q^(k)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, check_choice
from ..limits import F64, Term, field_value
from ..params import ParamsBase, Preset

__all__ = ["PAPER", "SPEC", "estimate", "SCBConfig", "SCBTask", "make_task", "stationary_distribution",
           "initial_parameters"]

#: the paper's key in the paper table and its specification
PAPER = "scb"
SPEC = "docs/papers/scb.md"


@dataclass(frozen=True)
class SCBConfig(ParamsBase):
    """Everything needed to build an SCB task, simulate it and train on it (every variant).

    Sizes: vocabulary ``N``, context ``T``, sparsity ``Q``. Learning rates ``eta_V``, ``eta_A`` are
    per optimiser step; one step consumes ``batch`` fresh sequences (online SGD).

    **Time unit: one optimiser step.** The SCB reduced ODE carries the learning rates in its
    right-hand side (``zeta' = eta_V (...)``, spec §3.3), so one unit of ODE time is one step of
    gradient descent on the batch-mean gradient: ``ode_time(step) = step``. Training logs at
    :meth:`log_steps` (``0, log_every, ..., steps``) and the ODE is solved at :meth:`ode_times`.

    **Variants** (``variant``, :data:`VARIANTS`; ``tdyn train scb --variant V``): ``lam``,
    ``lam_switch`` and ``normalise`` are read only by ``preconditioned``, ``softmax_lr_power`` only by
    ``softmax`` (:data:`VARIANT_ONLY`); setting one for a variant that ignores it is a
    :class:`ConfigError` (the generic check of :class:`~theory.params.ParamsBase`). ``lam_switch``
    without ``lam > 0`` is one too.

    **Presets** (:data:`PRESETS`, ``SCBConfig.preset(name, quick=...)``): the regimes of the
    comparison and the figures (``figures/scb``).
    """

    VARIANTS: ClassVar = {
        "preconditioned": "V D^-1, a_k/mu_k, proximal l1 once mean_k <a_k,q_k> T >= lam_switch (the paper's method)",
        "sgd": "plain SGD on (V, A), the same learning rates, no l1 (the baseline)",
        "softmax": "a^(k) = softmax(W[:, k]), plain SGD, attention lr eta_A T^softmax_lr_power (spec §6.1)",
    }
    VARIANT_ONLY: ClassVar = {"lam": ("preconditioned",), "lam_switch": ("preconditioned",),
                              "normalise": ("preconditioned",), "softmax_lr_power": ("softmax",)}
    PRESETS: ClassVar = {
        "compare": Preset(
            "inside the theory's assumptions (spec §3.3): eta_A well below 2/(m2 T), large batch, uniform q, "
            "online samples, lambda = 0, end-only normalisation",
            quick=dict(N=3, T=16, Q=2, eta_V=0.05, eta_A=0.05, batch=4096, steps=600, log_every=5),
            full=dict(N=3, T=16, Q=2, eta_V=0.05, eta_A=0.05, batch=16384, steps=600, log_every=5)),
        "overlay": Preset(
            "small batch, the SDE's regime (spec §3.6): ODE vs SDE band vs SGD runs",
            quick=dict(N=3, T=8, Q=2, eta_V=0.1, eta_A=0.1, batch=32, steps=300, log_every=10),
            full=dict(N=3, T=16, Q=2, eta_V=0.05, eta_A=0.05, batch=64, steps=600, log_every=10)),
        "escape_time": Preset(
            "stage-1 escape time vs T (spec §3.4); T, learning rate and steps are set per point",
            quick=dict(N=3, Q=2, batch=512), full=dict(N=3, Q=2, batch=2048)),
        "transfer": Preset(
            "transfer (spec §5, Decision 10): the pretraining task; T, learning rate and steps per point",
            quick=dict(N=3, Q=2, batch=256, task_seed=1)),
        "softmax_vs_linear": Preset(
            "softmax vs linear attention (spec §6 item 2): learned patterns and loss curves",
            quick=dict(N=3, T=16, Q=2, eta_V=0.05, eta_A=0.05, batch=256, steps=1200, log_every=8),
            full=dict(N=3, T=16, Q=2, eta_V=0.05, eta_A=0.05, batch=1024, steps=6000, log_every=40)),
        "l1_study": Preset(
            "l1-proximal vs vanilla SGD (spec §6 item 1): the study's task (Dirichlet(1) P, task_seed 0, not "
            "chosen by outcome) and l1 switch; T, batch, lr and lambda come from the study's grid",
            quick=dict(N=3, Q=2, task_seed=0, lam_switch=2.0)),
    }

    variant: str = "preconditioned"
    N: int = 3
    T: int = 16
    Q: int = 2
    alpha: float = 1.0  # Dirichlet concentration of P's columns
    transition: str = "dirichlet"  # or "doubly_stochastic" (Decision 2)
    attention: str = "uniform"  # or "dirichlet" weights on the support (Decision 3)
    shared_support: bool = False
    query: str = "outside"  # Decision 1: "outside" (A, theory) or "last" (B)
    P: tuple | None = None  # explicit column-stochastic transition matrix (overrides generation)
    task_seed: int = 0
    eta_V: float = 0.05
    eta_A: float = 0.05
    lam: float = 0.0  # l1 strength (mu_k-weighted penalty, threshold eta_A*lam)
    lam_switch: float = 2.0  # l1 switches on when mean_k <a_k,q_k>*T >= lam_switch (Decision 7)
    batch: int = 1024
    steps: int = 400
    log_every: int = 5
    init: str = "mu"  # V = mu 1^T ("mu") or 11^T/N ("uniform")
    # "end" (final normalisation only), "step" (projection 1^T a_k = 1 after the prox, Decision 6) or
    # "step_before_prox" (the projection between the gradient step and the prox: the prox still sets exact zeros)
    normalise: str = "end"
    softmax_lr_power: float = 2.0  # softmax variant: attention lr = eta_A * T**power (spec §6.1: T^2)
    seed: int = 0

    def validate(self) -> None:
        for name, least, what in (("N", 2, "vocabulary size"), ("T", 1, "context length"), ("Q", 1, "sparsity"),
                                  ("batch", 1, "batch size"), ("steps", 1, "steps"), ("log_every", 1, "log_every")):
            if getattr(self, name) < least:
                raise ConfigError(name, f"{what} must be >= {least}, got {getattr(self, name)}")
        if self.Q > self.T:
            raise ConfigError("Q", f"sparsity Q={self.Q} exceeds context length T={self.T}")
        if not self.alpha > 0:
            raise ConfigError("alpha", f"Dirichlet concentration must be > 0, got {self.alpha}")
        for name in ("eta_V", "eta_A"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(name, f"learning rate must be a finite number > 0, got {v}")
        if not (math.isfinite(self.lam) and self.lam >= 0):
            raise ConfigError("lam", f"l1 strength must be >= 0, got {self.lam}")
        for name, allowed in (
            ("transition", ("dirichlet", "doubly_stochastic")),
            ("attention", ("uniform", "dirichlet")),
            ("query", ("outside", "last")),
            ("init", ("mu", "uniform")),
            ("normalise", ("end", "step", "step_before_prox")),
        ):
            check_choice(name, getattr(self, name), allowed)
        if not (math.isfinite(self.lam_switch) and self.lam_switch >= 0):
            raise ConfigError("lam_switch", f"the switch-on level of T<a_k,q_k> must be >= 0 (0: l1 from the start), "
                              f"got {self.lam_switch}")
        if self.lam_switch != 2.0 and self.lam == 0:
            raise ConfigError("lam_switch", "has no effect without an l1 strength lam > 0")
        if not math.isfinite(self.softmax_lr_power):
            raise ConfigError("softmax_lr_power", f"must be finite, got {self.softmax_lr_power}")
        if self.P is not None:
            P = np.asarray(self.P, dtype=float)
            if P.shape != (self.N, self.N):
                raise ConfigError("P", f"expected an {self.N}x{self.N} matrix, got shape {P.shape}")
            if not np.all(np.isfinite(P)) or np.any(P < 0):
                raise ConfigError("P", "entries must be finite and non-negative")
            if not np.allclose(P.sum(axis=0), 1.0, atol=1e-9):
                raise ConfigError("P", f"not column-stochastic: column sums {np.round(P.sum(axis=0), 6).tolist()}")


    def ode_time(self, step: int | float) -> float:
        """ODE time of optimiser step ``step``: the step itself (the ODE carries the learning rates)."""
        return float(step)


@dataclass(frozen=True, eq=False)
class SCBTask:
    """A concrete SCB instance. Shapes: ``P`` (N, N) column-stochastic, ``mu`` (N,), ``Qm`` (T, N)
    with column k = q^(k), ``support`` (N, Q) int positions of each q^(k)."""

    P: np.ndarray
    mu: np.ndarray
    Qm: np.ndarray
    support: np.ndarray
    config: SCBConfig = field(repr=False)

    @property
    def N(self) -> int:
        return self.P.shape[0]

    @property
    def T(self) -> int:
        return self.Qm.shape[0]

    @property
    def Sigma(self) -> np.ndarray:
        return np.diag(self.mu) - np.outer(self.mu, self.mu)

    @property
    def K(self) -> float:
        """``tr(P Sigma P^T)``: how informative the transition is (spec §1.2)."""
        return float(np.trace(self.P @ self.Sigma @ self.P.T))

    @property
    def m2(self) -> float:
        return float(self.mu @ self.mu)

    @property
    def rho(self) -> np.ndarray:
        return (self.Qm**2).sum(axis=0)

    @property
    def P_tilde(self) -> np.ndarray:
        return self.P - np.outer(self.mu, np.ones(self.N))

    @property
    def symmetric(self) -> bool:
        return bool(np.allclose(self.rho, self.rho[0]))


def stationary_distribution(P: np.ndarray) -> np.ndarray:
    """``mu`` with ``P mu = mu``, ``1^T mu = 1``; raises if not unique (reducible chain)."""
    N = P.shape[0]
    A = np.vstack([P - np.eye(N), np.ones((1, N))])
    b = np.zeros(N + 1)
    b[-1] = 1.0
    mu, *_ = np.linalg.lstsq(A, b, rcond=None)
    eig = np.sort(np.abs(np.linalg.eigvals(P)))[::-1]
    if N > 1 and abs(eig[1] - 1) < 1e-9:
        raise ConfigError("P", "transition matrix has no unique stationary distribution (reducible or periodic)")
    if np.any(mu <= 1e-12):
        raise ConfigError("P", "stationary distribution has zero entries (some tokens never occur)")
    return mu / mu.sum()


def _doubly_stochastic(N: int, rng: np.random.Generator) -> np.ndarray:
    M = rng.random((N, N)) + 0.1
    for _ in range(500):  # Sinkhorn
        M /= M.sum(axis=0, keepdims=True)
        M /= M.sum(axis=1, keepdims=True)
    return M / M.sum(axis=0, keepdims=True)


def make_task(config: SCBConfig, P: np.ndarray | None = None) -> SCBTask:
    """Draw ``P`` (Decision 2), its stationary ``mu`` and the sparse targets ``q^(k)`` (Decision 3)."""
    rng = np.random.default_rng(config.task_seed)
    N, T_, Q_ = config.N, config.T, config.Q
    if P is None and config.P is not None:
        P = np.asarray(config.P, dtype=float)
    if P is None:
        if config.transition == "dirichlet":
            P = rng.dirichlet(np.full(N, config.alpha), size=N).T
        else:
            P = _doubly_stochastic(N, rng)
    mu = stationary_distribution(P)
    Qm = np.zeros((T_, N))
    support = np.zeros((N, Q_), dtype=np.int64)
    shared = np.sort(rng.choice(T_, size=Q_, replace=False))
    for k in range(N):
        S = shared if config.shared_support else np.sort(rng.choice(T_, size=Q_, replace=False))
        weights = np.full(Q_, 1.0 / Q_) if config.attention == "uniform" else rng.dirichlet(np.ones(Q_))
        Qm[S, k] = weights
        support[k] = S
    return SCBTask(P=P, mu=mu, Qm=Qm, support=support, config=config)


def initial_parameters(config: SCBConfig, task: SCBTask) -> tuple[np.ndarray, np.ndarray]:
    N, T_ = task.N, task.T
    V0 = np.outer(task.mu, np.ones(N)) if config.init == "mu" else np.full((N, N), 1.0 / N)
    A0 = np.full((T_, N), 1.0 / T_)
    return V0, A0


def estimate(c, command: str, paths: int) -> list[Term]:
    """Resource terms of ``command`` for this paper (the paper row's ``estimate`` slot; see
    :mod:`theory.limits`): the fields that size its arrays and symbolic systems."""
    N, T, B = field_value(c, "N", 3), field_value(c, "T", 16), field_value(c, "batch", 1)
    terms = [Term("memory", 6 * F64 * N * N, "N")]  # P, P_tilde, Sigma, ... (N x N)
    if command == "derive":
        terms.append(Term("symbolic_states", 2 + 2 * N, "N"))  # general_system(N): 2 + 2N
    if command == "train":
        terms += [Term("memory", 4 * F64 * B * T, "batch" if B > T else "T"),  # tokens, gathers
                  Term("memory", 3 * F64 * B * N, "batch" if B > N else "N"),  # predictions, one-hots
                  Term("memory", 2 * F64 * T * N, "T" if T > N else "N")]      # A (T x N) and grads
    if command == "sde":  # the full (V, A) space, noise estimated from 64 Monte-Carlo samples
        dim = N * N + T * N
        terms.append(Term("memory", F64 * paths * dim * 64 * 2, "N" if N > T else "T"))
    return terms
