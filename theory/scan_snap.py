"""Scan & Snap — training dynamics of a 1-layer transformer (Tian, Wang, Chen, Du, NeurIPS 2023).

Spec: ``papers/scan_snap.md``. Reparameterised model (spec §2.2): decoder ``Y`` (attended token ->
output token) and attention logits ``Z`` (query row, key column); the attended mixture is
l2-normalised in token space; the query does not attend to itself.

What this module derives (nothing here is typed from the paper's printed flow):

1. the ``T = inf`` population objective ``J_inf(Y, Z)`` (spec §2.5) in sympy for a numeric
   instance (``P(l|n)``, ``psi``) built from the official generator (spec §1.4), and its gradient
   ascent flow by differentiation (:func:`full_system`). The state is reduced exactly: only rows
   of ``Y`` on the union of supports move, and from ``Y(0) = 0`` every non-label output column
   stays equal, so they are one coordinate ``Y_l_o`` of multiplicity ``R = M_out - K`` (the flow
   of a coordinate shared by ``R`` columns is ``eta/R * dJ/dY_o``, the pulled-back metric);
2. the same objective on the symbolic minimal instance of spec Appendix A
   (:func:`minimal_instance`), used by the tests for checks 1-7;
3. the reduced attention ODE (Lemma 4 / Eqn. 10, compact form) with ``gamma(t)`` made exogenous
   by carrying ``h`` (Eqn. 44) as a state (:func:`reduced_system`), and the 1-D snap ODE of
   Theorem 4 (:func:`snap_system`) with the closed forms of Eqn. 45, 85, 122-129, Theorem 4 and
   the transition times.

Time: per-sample time ``t`` with class weights ``pi_n = 1/K`` on both Y and z (Decision 2); one
SGD step on a batch-mean gradient with learning rate ``eta`` and momentum ``mu`` is
``1/(1 - mu)`` units (:func:`ode_time`). ``M`` in the closed forms is the output vocabulary size
``M_out`` (Decision 3). Float64 throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from .core import ParamsBase, ReducedSystem
from .errors import ConfigError

PAPER = "scan-snap"
SPEC = "papers/scan_snap.md"

__all__ = [
    "PAPER",
    "ScanSnapConfig",
    "Config",
    "ScanSnapTask",
    "make_task",
    "population_objective",
    "gradient_ascent_flow",
    "full_system",
    "general_system",
    "embed_symmetric_state",
    "z_rows",
    "reduced_system",
    "snap_system",
    "minimal_instance",
    "closed_forms",
    "h_closed_form",
    "h_discrete",
    "gamma_of_t",
    "Gamma_of_t",
    "B_of_t",
    "B_theorem4",
    "transition_times",
    "chi_bounds",
    "systems",
    "default_run",
    "general_state_vector",
    "unpack_general_state",
    "observables_from_parameters",
    "entropy",
    "invariant_spread",
    "ode_time",
    "count_vector_objective",
    "sgd_ensemble",
]

t_sym = sp.Symbol("t", real=True)
eta_Y, eta_Z = sp.symbols("eta_Y eta_Z", positive=True)
R_sym = sp.Symbol("R", positive=True)  # number of non-label output tokens, M_out - K
M_sym, K_sym, C0_sym = sp.symbols("M K C_0", positive=True)
h_sym = sp.Symbol("h", real=True)


# ------------------------------------------------------------------------------------------------
# Configuration and task (spec §1.4, §2.3, §8 Decisions)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScanSnapConfig(ParamsBase):
    """Data generator (official ``Dataset2`` fields), model/optimiser and closed-form inputs.

    ``num_last`` query tokens, ``num_next_per_last`` classes per query (``K = num_last *
    num_next_per_last``); Syn-Small is ``num_last=2, num_next_per_last=1``; Syn-Medium is
    ``num_next_per_last=2``. ``vocab="code"`` uses the official output vocabulary ``M_code``;
    ``"paper"`` uses the ``num_common + K num_unique_per_next`` contextual tokens (Decision 3).
    ``T`` is the sequence length L (``T - 1`` contextual tokens + the query).
    ``M`` (0 = ``M_out``) and ``C0`` are the closed forms' vocabulary size and constant.
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
    path: str = "counts"  # "counts" (count vectors) or "sequences" (as the official code)
    seed: int = 0
    M: int = 0
    C0: float = 1.0
    class_weights: str = "uniform"  # "uniform": pi_n = 1/K on z (Decision 2); "literal": Eqn. 10 as printed

    @property
    def K(self) -> int:
        return self.num_last * self.num_next_per_last

    @property
    def M_out(self) -> int:
        ctx = self.num_common + self.K * self.num_unique_per_next
        return ctx + self.num_last + self.K if self.vocab == "code" else ctx

    @property
    def M_theory(self) -> int:
        return self.M or self.M_out

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
        if self.path not in ("counts", "sequences"):
            raise ConfigError("path", f"must be 'counts' or 'sequences', got {self.path!r}")
        if self.class_weights not in ("uniform", "literal"):
            raise ConfigError("class_weights", f"must be 'uniform' or 'literal', got {self.class_weights!r}")
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


def ode_time(step: int, momentum: float) -> float:
    """SGD step -> per-sample ODE time (Decision 2): a batch-mean step with learning rate eta is one
    unit of ``eta``-scaled gradient flow; heavy-ball momentum ``mu`` multiplies it by ``1/(1-mu)``."""
    return float(step) / (1.0 - momentum)


# ------------------------------------------------------------------------------------------------
# 1. The T = inf population objective and its gradient-ascent flow (spec §2.5)
# ------------------------------------------------------------------------------------------------
def population_objective(P_rows, z_rows, Y_cols, query_index, label_cols, other_mult=None, pi=None):
    """``J_inf = sum_n pi_n [w_n[n] - log sum_k e^{w_n[k]}]`` with ``w_n = Y^T f_n``,
    ``f_n = c~_n/|c~_n|``, ``c~_n = P(.|n) o exp(z_psi(n))`` (spec §2.5, Eqn. 5).

    Works on sympy or numbers. ``P_rows[n]``: dict token -> P(l|n) (support only);
    ``z_rows[m]``: dict token -> logit; ``Y_cols[k]``: dict token -> Y[l, k] for each output
    coordinate k; ``label_cols[n]``: the k of class n's label; ``other_mult[k]``: multiplicity of
    output coordinate k in the softmax (1 for labels, R for the shared non-label column).
    Returns ``(J, f)`` with ``f[n]`` the dict of f_n.
    """
    K = len(P_rows)
    pi = pi or [sp.Rational(1, K)] * K
    mult = other_mult or [1] * len(Y_cols)
    J, fs = 0, []
    for n in range(K):
        z = z_rows[query_index[n]]
        c = {l: p * sp.exp(z[l]) for l, p in P_rows[n].items()}  # Eqn. 5 (un-normalised score)
        norm = sp.sqrt(sum(v**2 for v in c.values()))
        f = {l: v / norm for l, v in c.items()}  # f_n = c_n/|c_n|_2 = LN(X^T b) at T = inf
        w = [sum(col.get(l, 0) * f[l] for l in f) for col in Y_cols]  # logits Y^T f_n
        lse = sp.log(sum(mk * sp.exp(wk) for mk, wk in zip(mult, w)))
        J += pi[n] * (w[label_cols[n]] - lse)
        fs.append(f)
    return J, fs


def gradient_ascent_flow(objective: sp.Expr, blocks) -> list[sp.Expr]:
    """``d(coords)/dt = rate / weight * dJ/d(coords)`` per block ``(coords, weight, rate)``: gradient
    ascent with the Euclidean metric of the full parameters pulled back to coordinates that stand
    for ``weight`` identical entries. No expansion (expressions keep their exp/sqrt structure)."""
    out = []
    for coords, weight, rate in blocks:
        out.extend(rate / weight * sp.diff(objective, c) for c in coords)
    return out


def _y_symbol(l: int, k) -> sp.Symbol:
    return sp.Symbol(f"Y_{l}_{k}", real=True)


def _z_symbol(m: int, l: int) -> sp.Symbol:
    return sp.Symbol(f"z_{m}_{l}", real=True)


def _state_layout(task: ScanSnapTask):
    rows = [int(l) for l in task.union_support]
    cols = list(range(task.K)) + ["o"]
    Ys = [[_y_symbol(l, k) for l in rows] for k in cols]
    zs = [[_z_symbol(m, int(l)) for l in task.query_support(m)] for m in range(task.num_last)]
    return rows, cols, Ys, zs


def _entropy_expr(weights: list[sp.Expr]) -> sp.Expr:
    s = sum(weights)
    return -sum(w / s * sp.log(w / s) for w in weights)


@lru_cache(maxsize=16)
def _full_system_cached(key) -> ReducedSystem:
    config = key
    task = make_task(config)
    rows, cols, Ys, zs = _state_layout(task)
    P_rows = [{int(l): float(task.P[n, l]) for l in task.support(n)} for n in range(task.K)]
    z_rows = [dict(zip((int(l) for l in task.query_support(m)), zs[m])) for m in range(task.num_last)]
    Y_cols = [dict(zip(rows, col)) for col in Ys]
    mult = [1] * task.K + [R_sym]
    J, fs = population_objective(P_rows, z_rows, Y_cols, list(task.query_index), list(range(task.K)), mult)
    blocks = [(tuple(s for col in Ys[: task.K] for s in col), 1, eta_Y), (tuple(Ys[-1]), R_sym, eta_Y),
              (tuple(s for row in zs for s in row), 1, eta_Z)]
    rhs = gradient_ascent_flow(J, blocks)
    state = tuple(s for b in blocks for s in b[0])
    # observables (spec §6): DT entropy (Fig. 6 metric), full-support entropy, loss, alpha_n[n]
    dt_ent, sup_ent = [], []
    for n in range(task.K):
        z = z_rows[task.query_index[n]]
        dt_ent.append(_entropy_expr([P_rows[n][int(l)] * sp.exp(z[int(l)]) for l in task.dt[n]]))
        sup_ent.append(_entropy_expr([p * sp.exp(z[l]) for l, p in P_rows[n].items()]))
    correct = []
    for n in range(task.K):
        w = [sum(col.get(l, 0) * fs[n][l] for l in fs[n]) for col in Y_cols]
        correct.append(sp.exp(w[n]) / sum(mk * sp.exp(wk) for mk, wk in zip(mult, w)))
    obs = {
        "dt_entropy": sum(dt_ent) / task.K,
        "support_entropy": sum(sup_ent) / task.K,
        "population_loss": -J,
        "correct_prob": sum(correct) / task.K,
    }
    return ReducedSystem(
        name="general", paper=PAPER, state=state, parameters=(eta_Y, eta_Z, R_sym), rhs=tuple(rhs),
        observables=obs, spec=f"{SPEC} §2.5 (T = inf coupled flow)",
        description=("Gradient ascent on J_inf(Y, Z) for the numeric instance; Y restricted to the "
                     "union of supports and to K label columns + one shared non-label column "
                     "(exact from Y(0) = 0); z restricted to the supports of each query's classes."),
    )


def general_system(config: ScanSnapConfig) -> ReducedSystem:
    """The ``T = inf`` coupled flow (Y, Z) derived from ``J_inf`` for ``config``'s instance with no
    symmetry assumed (only the shared non-label column). Exact from zero init and for any
    non-symmetric state; expensive beyond small instances (Syn-Small: ~1 min to derive), so the
    pipeline uses :func:`full_system` and tests compare the two on small instances."""
    return _full_system_cached(_layout_key(config))


def _layout_key(config: ScanSnapConfig) -> ScanSnapConfig:
    """Only the data layout determines the symbolic system (cache key)."""
    return ScanSnapConfig(num_last=config.num_last, num_next_per_last=config.num_next_per_last,
                          num_common=config.num_common, num_unique_per_next=config.num_unique_per_next,
                          common_prob=config.common_prob, unique_min=config.unique_min,
                          unique_max=config.unique_max, vocab=config.vocab,
                          class_weights=config.class_weights)


def full_parameters(config: ScanSnapConfig) -> dict[str, float]:
    return {"eta_Y": float(config.eta_Y), "eta_Z": float(config.eta_Z), "R": float(config.M_out - config.K)}


def general_state_vector(task: ScanSnapTask, Y: np.ndarray, Z: np.ndarray) -> np.ndarray:
    """Full parameters ``Y`` (M_in, M_out), ``Z`` (M_in, M_in) -> the full system's state. The
    shared non-label column is read as the mean of the non-label columns (exact when equal)."""
    rows = task.union_support
    others = np.setdiff1d(np.arange(task.M_out), task.label)
    parts = [Y[rows][:, task.label].T.ravel(), Y[rows][:, others].mean(1)]
    parts += [Z[task.query[np.argmax(task.query_index == m)], task.query_support(m)] for m in range(task.num_last)]
    return np.concatenate(parts)


def unpack_general_state(task: ScanSnapTask, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`general_state_vector` on (..., dim) arrays -> ``Y`` (..., M_in, M_out),
    ``Z`` (..., M_in, M_in) (entries outside the state are 0)."""
    y = np.asarray(y, dtype=np.float64)
    lead = y.shape[:-1]
    rows = task.union_support
    nr, K = rows.size, task.K
    Y = np.zeros(lead + (task.M_in, task.M_out))
    Z = np.zeros(lead + (task.M_in, task.M_in))
    lab = y[..., : K * nr].reshape(lead + (K, nr))
    oth = y[..., K * nr: (K + 1) * nr]
    others = np.setdiff1d(np.arange(task.M_out), task.label)
    for k in range(K):
        Y[..., rows, task.label[k]] = lab[..., k, :]
    Y[..., rows[:, None], others[None, :]] = oth[..., :, None]
    i = (K + 1) * nr
    for m in range(task.num_last):
        sup = task.query_support(m)
        q = task.query[np.argmax(task.query_index == m)]
        Z[..., q, sup] = y[..., i: i + sup.size]
        i += sup.size
    return Y, Z


def z_state_names(task: ScanSnapTask) -> list[str]:
    return [str(_z_symbol(m, int(l))) for m in range(task.num_last) for l in task.query_support(m)]


@dataclass(frozen=True, eq=False)
class SymmetricLayout:
    """Coordinates of the symmetric subspace of the official generator (spec §1.4): every class
    has the same P profile (C common tokens, U distinct tokens), so from ``Y(0) = Z(0) = 0`` the
    T = inf flow keeps (exactly) one value per group of entries:

    ``Y_own_j``  Y[dt_j(n), label n]        (K entries)      ``z_dt_j``  z[psi(n), dt_j(n)]  (K)
    ``Y_xlab_j`` Y[dt_j(n), label n'], n'!=n (K(K-1))        ``z_c``     z[m, c]              (num_last C)
    ``Y_o_j``    Y[dt_j(n), non-label]       (K R)
    ``Y_c_lab``  Y[c, label n]               (C K)           ``Y_c_o``   Y[c, non-label]      (C R)
    The ``weights`` are these group sizes (the pulled-back metric of the flow)."""

    names: tuple[str, ...]
    symbols: tuple[sp.Symbol, ...]
    weights: tuple[Any, ...]
    rates: tuple[sp.Symbol, ...]


def _symmetric_layout(config: ScanSnapConfig) -> SymmetricLayout:
    U, C, K, L = config.num_unique_per_next, config.num_common, config.K, config.num_last
    R = R_sym
    names, weights, rates = [], [], []

    def add(name, w, rate):
        names.append(name); weights.append(w); rates.append(rate)

    for j in range(U):
        add(f"Y_own_{j}", K, eta_Y)
        if K > 1:
            add(f"Y_xlab_{j}", K * (K - 1), eta_Y)
        add(f"Y_o_{j}", K * R, eta_Y)
    if C:
        add("Y_c_lab", C * K, eta_Y)
        add("Y_c_o", C * R, eta_Y)
    for j in range(U):
        add(f"z_dt_{j}", K, eta_Z)
    if C:
        add("z_c", L * C, eta_Z)
    syms = tuple(sp.Symbol(n, real=True) for n in names)
    return SymmetricLayout(tuple(names), syms, tuple(weights), tuple(rates))


@lru_cache(maxsize=16)
def _symmetric_system_cached(config: ScanSnapConfig) -> ReducedSystem:
    task = make_task(config)
    lay = _symmetric_layout(config)
    s = dict(zip(lay.names, lay.symbols))
    U, C, K = config.num_unique_per_next, config.num_common, config.K
    # J_inf restricted to the subspace: all K class terms are equal, so J = the term of class 0.
    # Tokens of class 0: common tokens (C identical entries) and its U distinct tokens.
    toks = [("c", i) for i in range(C)] + [("dt", j) for j in range(U)]
    P0 = {tk: float(task.P[0, task.common[tk[1]]] if tk[0] == "c" else task.P[0, task.dt[0, tk[1]]]) for tk in toks}
    z_row = {tk: (s["z_c"] if tk[0] == "c" else s[f"z_dt_{tk[1]}"]) for tk in toks}
    own = {tk: (s["Y_c_lab"] if tk[0] == "c" else s[f"Y_own_{tk[1]}"]) for tk in toks}
    other = {tk: (s["Y_c_o"] if tk[0] == "c" else s[f"Y_o_{tk[1]}"]) for tk in toks}
    Y_cols = [own]
    mult = [1]
    if K > 1:  # every other label column n' sees class 0's tokens through Y_c_lab / Y_xlab_j
        Y_cols.append({tk: (s["Y_c_lab"] if tk[0] == "c" else s[f"Y_xlab_{tk[1]}"]) for tk in toks})
        mult.append(K - 1)
    Y_cols.append(other)
    mult.append(R_sym)
    J, fs = population_objective([P0], [z_row], Y_cols, [0], [0], mult, pi=[1])
    rhs = [rate / w * sp.diff(J, sym) for sym, w, rate in zip(lay.symbols, lay.weights, lay.rates)]
    dt_ent = _entropy_expr([P0[("dt", j)] * sp.exp(s[f"z_dt_{j}"]) for j in range(U)])
    sup_ent = _entropy_expr([P0[tk] * sp.exp(z_row[tk]) for tk in toks])
    w = [sum(col[tk] * fs[0][tk] for tk in toks) for col in Y_cols]
    correct = sp.exp(w[0]) / sum(mk * sp.exp(wk) for mk, wk in zip(mult, w))
    obs = {"dt_entropy": dt_ent, "support_entropy": sup_ent, "population_loss": -J, "correct_prob": correct}
    if C:
        obs["ct_logit"] = s["z_c"]
    return ReducedSystem(
        name="full", paper=PAPER, state=lay.symbols, parameters=(eta_Y, eta_Z, R_sym), rhs=tuple(rhs),
        observables=obs, spec=f"{SPEC} §2.5 (T = inf coupled flow, symmetric subspace)",
        description=("Gradient ascent on J_inf(Y, Z) restricted to the exact invariant subspace of "
                     "the official generator from zero init; each coordinate stands for a group of "
                     "equal entries of Y or Z and moves at rate/group size times dJ/dcoordinate."),
    )


def full_system(config: ScanSnapConfig) -> ReducedSystem:
    """The full ``T = inf`` coupled flow (Y, Z) derived from ``J_inf`` (spec §2.5), on the exact
    symmetric subspace of the official generator (:class:`SymmetricLayout`). Its state embeds
    into full parameters with :func:`embed_symmetric_state`."""
    return _symmetric_system_cached(_layout_key(config))


def embed_symmetric_state(task: ScanSnapTask, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric state (..., dim) -> full ``Y`` (..., M_in, M_out), ``Z`` (..., M_in, M_in)."""
    cfg = task.config
    lay = _symmetric_layout(cfg)
    y = np.asarray(y, np.float64)
    v = {n: y[..., i] for i, n in enumerate(lay.names)}
    lead = y.shape[:-1]
    Y = np.zeros(lead + (task.M_in, task.M_out))
    Z = np.zeros(lead + (task.M_in, task.M_in))
    others = np.setdiff1d(np.arange(task.M_out), task.label)
    for n in range(task.K):
        for j in range(cfg.num_unique_per_next):
            l = task.dt[n, j]
            for n2 in range(task.K):
                Y[..., l, task.label[n2]] = v[f"Y_own_{j}"] if n2 == n else v[f"Y_xlab_{j}"]
            Y[..., l, others] = v[f"Y_o_{j}"][..., None]
            Z[..., task.query[n], l] = v[f"z_dt_{j}"]
    for c in task.common:
        Y[..., c, task.label] = v["Y_c_lab"][..., None]
        Y[..., c, others] = v["Y_c_o"][..., None]
        for q in np.unique(task.query):
            Z[..., q, c] = v["z_c"]
    return Y, Z


def z_rows(task: ScanSnapTask, Z: np.ndarray) -> np.ndarray:
    """The moving attention logits: ``z[psi(n), supp(n)]`` for every class, (..., K, |supp|)."""
    idx = np.stack([task.support(n) for n in range(task.K)])
    return np.stack([Z[..., task.query[n], idx[n]] for n in range(task.K)], axis=-2)


# ------------------------------------------------------------------------------------------------
# 2. Symbolic minimal instance (spec Appendix A)
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def minimal_instance() -> dict[str, Any]:
    """K = 2 classes sharing one query; tokens c (common), a1, a2 (class 1), b1, b2 (class 2);
    output columns n1, n2 and one extra 'other' column. Returns symbols, ``J``, ``f`` and the
    derived gradients ``dJ/dz``, ``dJ/dY`` and ``dJ/df_n``."""
    toks = ["c", "a1", "a2", "b1", "b2"]
    z = {l: sp.Symbol(f"z_{l}", real=True) for l in toks}
    Pc1, Pa1, Pa2, Pc2, Pb1, Pb2 = sp.symbols("P_c1 P_a1 P_a2 P_c2 P_b1 P_b2", positive=True)
    P_rows = [{"c": Pc1, "a1": Pa1, "a2": Pa2}, {"c": Pc2, "b1": Pb1, "b2": Pb2}]
    cols = ["n1", "n2", "o"]
    Y = {(l, k): sp.Symbol(f"Y_{l}_{k}", real=True) for l in toks for k in cols}
    Y_cols = [{l: Y[(l, k)] for l in toks} for k in cols]
    J, f = population_objective(P_rows, [z], Y_cols, [0, 0], [0, 1])
    # dJ/df_n with f_n as free symbols (chain-rule factor of the z-gradient)
    fsym = [{l: sp.Symbol(f"f{n + 1}_{l}", real=True) for l in P_rows[n]} for n in range(2)]
    Jf = 0
    for n in range(2):
        w = [sum(col[l] * fsym[n][l] for l in fsym[n]) for col in Y_cols]
        Jf += sp.Rational(1, 2) * (w[n] - sp.log(sum(sp.exp(wk) for wk in w)))
    return {
        "tokens": toks, "z": z, "P_rows": P_rows, "Y": Y, "cols": cols, "J": J, "f": f,
        "dJ_dz": {l: sp.diff(J, z[l]) for l in toks},
        "dJ_dY": {key: sp.diff(J, s) for key, s in Y.items()},
        "f_symbols": fsym, "J_of_f": Jf,
        "dJ_df": [{l: sp.diff(Jf, s) for l, s in fsym[n].items()} for n in range(2)],
    }


# ------------------------------------------------------------------------------------------------
# 3. Closed forms (spec §3.1, §3.5) and the reduced / snap ODEs
# ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def closed_forms() -> dict[str, sp.Expr]:
    """Symbolic closed forms in per-sample time ``t`` (h evaluated at ``t/K``), spec §3.1/§3.5.

    ``h_lambert`` solves Eqn. 44 (Eqn. 45 made explicit with Lambert W); ``gamma`` Eqn. 85;
    ``Gamma`` Eqn. 128 (a function of ``h``); ``z_ct`` Eqn. 122; ``xi`` Eqn. 123; ``B`` Eqn. 124
    with ``B(0) = 0`` (Decision 5) and ``B_paper`` without; branches of Theorem 4; ``t0_prime``,
    ``t0`` (without the ``1 + omega_1`` factor)."""
    s = sp.Symbol("s", nonnegative=True)  # per-class time t/K
    A = M_sym * eta_Y * s + 1
    h_lambert = (A / (M_sym - 1) - sp.LambertW(sp.exp(A / (M_sym - 1)) / (M_sym - 1))) / M_sym
    gamma_h = (M_sym - 1) ** 2 * h_sym / ((M_sym - 1) + sp.exp(M_sym * h_sym))
    Gamma_h = eta_Z / eta_Y * K_sym * (M_sym - 1) ** 2 * h_sym**2 / 2
    B = sp.Rational(1, 4) * sp.log((C0_sym + 4 * Gamma_h) / C0_sym)
    nu = eta_Y / eta_Z
    early = sp.Rational(1, 4) * sp.log(C0_sym + 2 * (M_sym - 1) ** 2 / (K_sym * M_sym**2) * eta_Y * eta_Z * t_sym**2)
    late = sp.Rational(1, 4) * sp.log(C0_sym + 2 * K_sym * (M_sym - 1) ** 2 / M_sym**2 / nu
                                      * sp.log(M_sym * eta_Y * t_sym / K_sym) ** 2)
    return {
        "s": s,
        "h_lambert": h_lambert,  # function of s = t/K
        "h_invariant": sp.exp(M_sym * h_sym) + (M_sym - 1) * M_sym * h_sym,  # = M eta_Y s + 1 (Eqn. 45)
        "h_rate": eta_Y / ((M_sym - 1) + sp.exp(M_sym * h_sym)),  # Eqn. 44, dh/ds
        "gamma": gamma_h,
        "Gamma": Gamma_h,
        "z_ct": -sp.Rational(1, 4) * sp.log(1 + 4 * Gamma_h / C0_sym),
        "xi": gamma_h / (C0_sym + 4 * Gamma_h),
        "B": B,
        "B_paper": sp.Rational(1, 4) * sp.log(C0_sym + 4 * Gamma_h),
        "B_early": early,
        "B_late": late,
        "t0_prime": K_sym * sp.log(M_sym) / eta_Y,
        "t0": 2 * K_sym * sp.log(M_sym) / eta_Y,
    }


def h_closed_form(s, M: float, eta_Y_: float) -> np.ndarray:
    """``h(s)`` of Eqn. 45 (s = per-class time), by Lambert W for moderate arguments and by Newton on
    ``e^{Mh} + (M-1)Mh = M eta_Y s + 1`` (overflow-safe) otherwise."""
    from scipy.special import lambertw

    s = np.asarray(s, dtype=np.float64)
    A = M * eta_Y_ * s + 1.0
    u = A / (M - 1)
    with np.errstate(over="ignore"):
        x = np.exp(u) / (M - 1)
        hw = (u - np.real(lambertw(x))) / M
    bad = ~np.isfinite(hw) | (u > 600)
    if np.any(bad):  # Newton in y = Mh on e^y + (M-1) y = A
        Ab = np.broadcast_to(A, s.shape)[bad]
        y = np.log(Ab)  # e^y ~ A dominates for large A
        for _ in range(60):
            g = np.exp(y) + (M - 1) * y - Ab
            y = y - g / (np.exp(y) + (M - 1))
        hw = np.array(hw, dtype=np.float64)
        hw[bad] = y / M
    return hw


def h_discrete(steps: int, M: float, eta_Y_: float) -> np.ndarray:
    """``h*(s)`` for s = 0..steps (Eqn. 33, Lemma 5)."""
    h = np.zeros(steps + 1)
    for i in range(1, steps + 1):
        h[i] = h[i - 1] + eta_Y_ / ((M - 1) + np.exp(M * h[i - 1]))
    return h


def gamma_of_t(t, M, K, eta_Y_):
    """Eqn. 85 with ``h(t/K)``."""
    h = h_closed_form(np.asarray(t, float) / K, M, eta_Y_)
    return (M - 1) ** 2 * h / ((M - 1) + np.exp(M * h))


def Gamma_of_t(t, M, K, eta_Y_, eta_Z_):
    """Eqn. 128: ``Gamma(t) = eta_Z/eta_Y K (M-1)^2 h(t/K)^2 / 2``."""
    h = h_closed_form(np.asarray(t, float) / K, M, eta_Y_)
    return eta_Z_ / eta_Y_ * K * (M - 1) ** 2 * h**2 / 2


def B_of_t(t, M, K, eta_Y_, eta_Z_, C0=1.0, paper_offset=False):
    """Eqn. 124/129; ``B(0) = 0`` form (Decision 5) unless ``paper_offset``."""
    G = Gamma_of_t(t, M, K, eta_Y_, eta_Z_)
    return 0.25 * np.log(C0 + 4 * G) if paper_offset else 0.25 * np.log((C0 + 4 * G) / C0)


def B_theorem4(t, M, K, eta_Y_, eta_Z_, C0=1.0):
    """The two branches of Theorem 4 (Eqn. 14), each evaluated everywhere: ``(early, late)``."""
    f = closed_forms()
    subs = {M_sym: M, K_sym: K, eta_Y: eta_Y_, eta_Z: eta_Z_, C0_sym: C0}
    e = sp.lambdify(t_sym, f["B_early"].subs(subs), "numpy")
    lt = sp.lambdify(t_sym, f["B_late"].subs(subs), "numpy")
    t = np.asarray(t, float)
    with np.errstate(all="ignore"):
        return np.asarray(e(t), float) * np.ones_like(t), np.asarray(lt(t), float) * np.ones_like(t)


def transition_times(M, K, eta_Y_) -> tuple[float, float]:
    """``(t0', t0)`` = ``(K ln M/eta_Y, 2 K ln M/eta_Y)`` (Theorem 4, without 1 + omega_1)."""
    return K * math.log(M) / eta_Y_, 2 * K * math.log(M) / eta_Y_


def chi_bounds(t, M, K, eta_Y_, eta_Z_, f0sq, C0=1.0):
    """Eqn. 12: ``(exp(2 f0^2 B), exp(2 B))``."""
    B = B_of_t(t, M, K, eta_Y_, eta_Z_, C0)
    return np.exp(2 * f0sq * B), np.exp(2 * B)


@lru_cache(maxsize=1)
def snap_system() -> ReducedSystem:
    """Theorem 4 as an ODE in per-sample time: ``dh/dt = eta_Y/(K((M-1) + e^{Mh}))`` (Eqn. 44 at
    t/K), ``dz_ct/dt = -eta_Z gamma e^{4 z_ct}/C_0`` (Eqn. 13), ``dGamma/dt = eta_Z gamma``,
    ``dB/dt = eta_Z xi`` with ``xi = gamma e^{4 z_ct}/C_0`` (Eqn. 13/123)."""
    f = closed_forms()
    zc, G, B = sp.symbols("z_ct Gamma B", real=True)
    gam = f["gamma"]
    rhs = (f["h_rate"] / K_sym, -eta_Z * gam * sp.exp(4 * zc) / C0_sym, eta_Z * gam,
           eta_Z * gam * sp.exp(4 * zc) / C0_sym)
    return ReducedSystem(
        name="snap", paper=PAPER, state=(h_sym, zc, G, B), parameters=(M_sym, K_sym, eta_Y, eta_Z, C0_sym),
        rhs=rhs, observables={"gamma": gam, "xi": gam * sp.exp(4 * zc) / C0_sym},
        closed_forms={k: f[k] for k in ("Gamma", "z_ct", "B", "xi")},
        spec=f"{SPEC} §3.5 (Theorem 4, 1-D snap ODE)",
        description="Single common token with the same C_0 in z and xi; h carries gamma(t).",
    )


@lru_cache(maxsize=16)
def _reduced_system_cached(config: ScanSnapConfig) -> ReducedSystem:
    task = make_task(config)
    U, C, K = config.num_unique_per_next, config.num_common, config.K
    f = closed_forms()
    zdt = sp.symbols(f"z_dt_0:{U}", real=True)
    zc = sp.Symbol("z_c", real=True)
    # symmetric subspace (as full_system): every class has the same f profile
    P_dt = [float(task.P[0, l]) for l in task.dt[0]]
    P_c = float(task.P[0, task.common[0]]) if C else 0.0
    c_dt = [p * sp.exp(z) for p, z in zip(P_dt, zdt)]
    c_c = P_c * sp.exp(zc) if C else 0
    norm = sp.sqrt(sum(v**2 for v in c_dt) + C * c_c**2)
    f_dt = [v / norm for v in c_dt]
    f_c = c_c / norm
    # G = F^T F: |f_n| = 1 on the diagonal, overlap rho = C f_c^2 off it (common tokens only)
    rho = sp.Symbol("rho", positive=True)
    G = sp.Matrix(K, K, lambda i, j: 1 if i == j else rho)
    Ginv = sp.simplify(G.inv()).subs(rho, C * f_c**2)
    gam = f["gamma"]
    weight = sp.Rational(1, K) if config.class_weights == "uniform" else 1
    # Eqn. 10 compact: z_m += eta_Z gamma sum_{n in psi^-1(m)} f_n o (F G^-1 e_n - f_n)
    rhs_dt = [eta_Z * gam * weight * fj * (fj * Ginv[0, 0] - fj) for fj in f_dt]  # class-n DT rows
    col_sum = sum(Ginv[k, 0] for k in range(K))  # [F G^-1 e_n]_c = f_c sum_n' Ginv[n', n]
    rhs_c = eta_Z * gam * weight * config.num_next_per_last * f_c * (f_c * col_sum - f_c)
    xi = gam * (Ginv[0, 0] - 1)  # Eqn. 12 leading order, the same for every class
    B = sp.Symbol("B", real=True)
    state = (h_sym, *zdt, *((zc,) if C else ()), B)
    rhs = (f["h_rate"] / K_sym, *rhs_dt, *((rhs_c,) if C else ()), eta_Z * weight * xi)
    dt_ent = _entropy_expr([p * sp.exp(z) for p, z in zip(P_dt, zdt)])
    return ReducedSystem(
        name="reduced", paper=PAPER, state=state, parameters=(M_sym, K_sym, eta_Y, eta_Z),
        rhs=tuple(rhs), observables={"dt_entropy": dt_ent, "gamma": gam, "xi": xi},
        spec=f"{SPEC} §3.2 (Lemma 4 / Eqn. 10 compact form, gamma from h(t/K))",
        description=("Reduced attention ODE with exogenous gamma(t) on the symmetric subspace of the "
                     "official generator; B = eta_Z int xi dt (per class, Decision 2 weights)."),
    )


def reduced_system(config: ScanSnapConfig) -> ReducedSystem:
    return _reduced_system_cached(_layout_key(config))


def reduced_parameters(config: ScanSnapConfig) -> dict[str, float]:
    return {"M": float(config.M_theory), "K": float(config.K), "eta_Y": float(config.eta_Y),
            "eta_Z": float(config.eta_Z)}


# ------------------------------------------------------------------------------------------------
# 4. Observables of full parameters (numpy; independent of the sympy expressions)
# ------------------------------------------------------------------------------------------------
def entropy(p: np.ndarray, axis: int = -1) -> np.ndarray:
    p = p / p.sum(axis, keepdims=True)
    return -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)).sum(axis)


def attention_scores(task: ScanSnapTask, Z: np.ndarray) -> np.ndarray:
    """``c_n`` (Eqn. 5) from parameters: (..., K, M_in), normalised over supp(n)."""
    Zq = Z[..., task.query, :]  # (..., K, M_in) rows z_psi(n)
    with np.errstate(over="ignore"):
        c = task.P * np.exp(Zq - Zq.max(-1, keepdims=True))
    return c / c.sum(-1, keepdims=True)


def invariant_spread(task: ScanSnapTask, Z: np.ndarray, Z0: np.ndarray | None = None, n: int = 0) -> np.ndarray:
    """``max_l I_l / min_l I_l`` over G_DT(n), ``I_l = (1 - e^{-2 dz}) e^{-2 z(0)}/P(l|n)^2``
    (spec §3.4 item 1/4); 1 for the reduced dynamics."""
    q = task.query[n]
    dts = task.dt[n]
    z = Z[..., q, dts]
    z0 = np.zeros_like(z) if Z0 is None else Z0[..., q, dts]
    I = (1 - np.exp(-2 * (z - z0))) * np.exp(-2 * z0) / task.P[n, dts] ** 2
    lo, hi = I.min(-1), I.max(-1)
    with np.errstate(all="ignore"):
        return np.where(np.abs(lo) > 1e-300, hi / np.where(lo == 0, 1.0, lo), 1.0)  # 1 before any move


def observables_from_parameters(Y: np.ndarray, Z: np.ndarray, task: ScanSnapTask) -> dict[str, np.ndarray]:
    """Spec §6 observables of full ``Y`` (..., M_in, M_out), ``Z`` (..., M_in, M_in), at T = inf."""
    Y = np.asarray(Y, np.float64)
    Z = np.asarray(Z, np.float64)
    c = attention_scores(task, Z)
    dt_c = np.take_along_axis(c, np.broadcast_to(task.dt, c.shape[:-1] + (task.dt.shape[1],)), -1)
    f = c / np.linalg.norm(c, axis=-1, keepdims=True)
    logits = np.einsum("...nl,...lk->...nk", f, Y)
    logits = logits - logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    lab = np.take_along_axis(logp, np.broadcast_to(task.label[:, None], logp.shape[:-1] + (1,)), -1)[..., 0]
    ct = Z[..., task.query, :][..., task.common] if task.common.size else np.zeros(Z.shape[:-2] + (task.K, 1))
    return {
        "dt_entropy": entropy(dt_c).mean(-1),
        "support_entropy": entropy(c).mean(-1),
        "population_loss": -lab.mean(-1),
        "correct_prob": np.exp(lab).mean(-1),
        "ct_logit": ct.mean((-2, -1)),
        "invariant_spread": invariant_spread(task, Z),
        "y_rowsum_spread": np.abs(Y.sum(-1)).max(-1),
        "z_rowsum_spread": np.abs(Z.sum(-1)).max(-1),
    }


# ------------------------------------------------------------------------------------------------
# 5. Finite-T minibatch SGD as a stochastic map (spec §1.3, Decision 9), jax, vmapped ensembles
# ------------------------------------------------------------------------------------------------
def count_vector_objective(Y, Z, counts, n, query, label):
    """Batch-mean J (jax) of samples with token counts ``counts`` (B, M_in) and classes ``n`` (B,):
    J_inf with ``P(.|n)`` replaced by the empirical counts (exact for finite T, spec §1.3)."""
    import jax
    import jax.numpy as jnp

    zq = Z[query[n]]
    logits = jnp.where(counts > 0, zq + jnp.log(jnp.where(counts > 0, counts, 1.0)), -jnp.inf)
    mix = jax.nn.softmax(logits, axis=-1)
    u = mix / jnp.linalg.norm(mix, axis=-1, keepdims=True)
    w = u @ Y
    return jnp.mean(jnp.take_along_axis(w, label[n][:, None], 1)[:, 0] - jax.scipy.special.logsumexp(w, axis=-1))


def sgd_ensemble(config: ScanSnapConfig, lrs, paths_per_lr: int, *, seed: int = 0, log_every: int | None = None):
    """Finite-T SGD (momentum ``config.momentum``, batch ``config.batch``, ``T - 1`` contextual
    tokens drawn as count vectors) as a stochastic map in jax: its gradient is ``jax.grad`` of
    :func:`count_vector_objective`; ``paths_per_lr`` seeds for each ``(eta_Y, eta_Z)`` in ``lrs``,
    all vmapped, steps by ``lax.scan``. Zero or default init as the config says. Returns
    ``(times, Y, Z)`` with Y (paths, n_logged, M_in, M_out), Z (paths, n_logged, M_in, M_in) and
    the per-path learning rates (paths, 2). Float64."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    task = make_task(config)
    P = jnp.asarray(task.P)
    query, label = jnp.asarray(task.query), jnp.asarray(task.label)
    B, L, mu = config.batch, config.T - 1, config.momentum
    every = log_every or config.log_every
    n_log = config.steps // every
    lr = jnp.asarray(np.repeat(np.asarray(lrs, float).reshape(-1, 2), paths_per_lr, axis=0))
    grad = jax.grad(count_vector_objective, argnums=(0, 1))

    def one_path(key, lr_p):
        kinit, kloop = jax.random.split(key)
        if config.zero_init:
            Y0 = jnp.zeros((task.M_in, task.M_out))
            Z0 = jnp.zeros((task.M_in, task.M_in))
        else:
            k1, k2 = jax.random.split(kinit)
            b = 1.0 / np.sqrt(task.M_in)
            Y0 = jax.random.uniform(k1, (task.M_in, task.M_out), minval=-b, maxval=b)
            Z0 = jax.random.uniform(k2, (task.M_in, task.M_in), minval=-b, maxval=b)

        def step(carry, key):
            Y, Z, vY, vZ = carry
            k1, k2 = jax.random.split(key)
            n = jax.random.randint(k1, (B,), 0, task.K)
            counts = jax.random.multinomial(k2, L, P[n])
            gY, gZ = grad(Y, Z, counts, n, query, label)
            vY, vZ = mu * vY + gY, mu * vZ + gZ  # PyTorch momentum, ascent on J
            return (Y + lr_p[0] * vY, Z + lr_p[1] * vZ, vY, vZ), None

        def block(carry, key):
            carry, _ = jax.lax.scan(step, carry, jax.random.split(key, every))
            return carry, (carry[0], carry[1])

        init = (Y0, Z0, jnp.zeros_like(Y0), jnp.zeros_like(Z0))
        _, (Ys, Zs) = jax.lax.scan(block, init, jax.random.split(kloop, n_log))
        return jnp.concatenate([Y0[None], Ys]), jnp.concatenate([Z0[None], Zs])

    keys = jax.random.split(jax.random.PRNGKey(seed), lr.shape[0])
    Y, Z = jax.jit(jax.vmap(one_path))(keys, lr)
    times = np.array([ode_time(i * every, mu) for i in range(n_log + 1)])
    return times, np.asarray(Y), np.asarray(Z), np.asarray(lr)


# ------------------------------------------------------------------------------------------------
# CLI conventions (figures/cli.py)
# ------------------------------------------------------------------------------------------------
def systems(config: ScanSnapConfig | None = None) -> list[ReducedSystem]:
    """What `tdyn derive scan-snap` prints: the snap ODE, the reduced z-ODE (K <= 3) and the full
    flow of the config's instance."""
    config = config or ScanSnapConfig()
    out = [snap_system()]
    if config.K <= 3:
        out.append(reduced_system(config))
    out.append(full_system(config))
    return out


def default_run(config: ScanSnapConfig) -> dict[str, Any]:
    """`tdyn simulate scan-snap`: the full T = inf flow from zero init over the training horizon
    (per-sample time ``steps/(1 - momentum)``)."""
    if not config.zero_init:
        raise ConfigError("zero_init", "the T = inf system is reduced exactly only from Y(0) = Z(0) = 0")
    system = full_system(config)
    n = config.steps // config.log_every + 1
    t_end = ode_time(config.steps, config.momentum if config.optimizer == "sgd" else 0.0)
    # the flow is not stiff for learning rates in the theory's range: explicit RK avoids the
    # implicit solvers' Jacobians (Kvaerno5 on this system is ~15x slower than Tsit5)
    return {"system": system, "params": full_parameters(config), "y0": np.zeros(len(system.state)),
            "t": np.linspace(0.0, t_end, n),
            "solve_options": {"diffrax": {"method": "Tsit5"}, "scipy": {"method": "DOP853"}}}


def problem(config) -> "Problem":
    """The :class:`~theory.Problem` that ``tdyn simulate`` integrates (wraps :func:`default_run`)."""
    from .problem import Problem

    run = default_run(config)
    return Problem(run["system"], run["params"], run["y0"], run["t"], run.get("solve_options", {}))
