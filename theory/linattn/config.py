"""linattn configuration (docs/papers/linattn.md §1, §2, §5, §6).

:class:`LinAttnConfig` owns every setting of both parametrisations (merged ``ATTN_M``, separate ``ATTN_S``), the
data model, the initialisation and the training protocol, and the paper's **time convention**.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import ConfigError, check_choice
from ..limits import F64, Term, field_value
from ..params import ParamsBase, Preset

__all__ = ["PAPER", "SPEC", "LinAttnConfig", "estimate", "INITS", "MODES"]

#: the paper's key in the paper table and its specification
PAPER = "linattn"
SPEC = "docs/papers/linattn.md"

#: initialisations (spec §5): the reduction's class, or i.i.d. Gaussian entries
INITS = ("aligned", "random")
#: training protocols (spec §5)
MODES = ("gd", "sgd")


@dataclass(frozen=True)
class LinAttnConfig(ParamsBase):
    """In-context linear regression with multi-head linear attention (spec §1-§2).

    Data: ``D`` input dimensions with covariance eigenvalues ``lams`` (``len(lams) == D``, decreasing), context
    length ``N``, tasks ``w ~ N(0, I/D)``. Model: ``H`` heads; the separate variant has key/query rank ``R``.
    Initialisation ``init_kind`` at scale ``init``: ``aligned`` puts head ``h`` on component ``h mod D``
    (balanced: value, key and query of equal size ``init``; merged: ``v_h = sqrt(D) u``, ``U_h = u I``, the
    class of the analytic time course) and ``random`` draws every entry i.i.d. ``N(0, init^2)``.

    **Time unit: ``lr`` times the optimiser step.** The reduced flow has unit rate (``dθ/dt = -∂L/∂θ``, spec
    §3), so gradient descent with learning rate ``lr`` follows it at ``ode_time(step) = lr * step``.

    **Training** (``mode``): ``gd`` is full-batch gradient descent on a fixed training set of ``samples``
    sequences; ``sgd`` is online SGD on ``batch`` fresh sequences per step (``samples`` unused).
    """

    VARIANTS: ClassVar = {
        "merged": "ATTN_M: one key-query matrix U_h per head (a two-layer linear network on cubic features)",
        "separate": "ATTN_S: U_h = K_h^T Q_h with rank-R keys and queries (saddle-to-saddle)",
    }
    VARIANT_ONLY: ClassVar = {"R": ("separate",)}
    PRESETS: ClassVar = {
        "compare": Preset(
            "inside the reduction (spec §3): aligned balanced initialisation, online SGD with a large batch",
            quick=dict(D=3, N=16, H=3, lams=(1.0, 0.6, 0.36), init=0.08, lr=0.25, steps=1600, log_every=20,
                       batch=256, mode="sgd"),
            full=dict(D=3, N=16, H=3, lams=(1.0, 0.6, 0.36), init=0.08, lr=0.25, steps=1600, log_every=10,
                      batch=4096, mode="sgd")),
        "isotropic": Preset(
            "the class of the merged analytic time course (spec §3.1): Λ = I, aligned balanced initialisation",
            quick=dict(variant="merged", D=3, N=16, H=1, lams=(1.0, 1.0, 1.0), init=0.05, lr=0.1, steps=600,
                       log_every=10, batch=512, mode="sgd")),
    }

    variant: str = "separate"
    D: int = 3
    N: int = 16
    H: int = 3
    R: int = 1
    lams: tuple[float, ...] = (1.0, 0.6, 0.36)
    init: float = 0.08
    init_kind: str = "aligned"
    lr: float = 0.25
    steps: int = 1600
    log_every: int = 20
    mode: str = "sgd"
    batch: int = 256
    samples: int = 4096
    seed: int = 0

    def validate(self):
        for name in ("D", "N", "H", "R", "batch", "samples"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if len(self.lams) != self.D:
            raise ConfigError("lams", f"needs D = {self.D} eigenvalues, got {len(self.lams)}")
        if any(not (lam > 0) for lam in self.lams):
            raise ConfigError("lams", f"eigenvalues must be > 0, got {self.lams}")
        if any(a < b for a, b in zip(self.lams, self.lams[1:])):
            raise ConfigError("lams", f"must be in decreasing order (principal components), got {self.lams}")
        if not self.init > 0:
            raise ConfigError("init", f"must be > 0, got {self.init}")
        if not self.lr > 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        check_choice("init_kind", self.init_kind, INITS)
        check_choice("mode", self.mode, MODES)
        if self.variant == "separate" and self.R > self.D:
            raise ConfigError("R", f"rank must be <= D = {self.D}, got {self.R}")

    def ode_time(self, step):
        return float(self.lr) * float(step)

    @property
    def lam(self) -> np.ndarray:
        """The covariance eigenvalues as a float64 array, shape ``(D,)``."""
        return np.asarray(self.lams, dtype=np.float64)


def estimate(c, command: str, paths: int) -> list[Term]:
    """Resource terms of ``command`` (the row's ``estimate`` slot, :mod:`theory.limits`)."""
    D, N, H = field_value(c, "D", 3), field_value(c, "N", 16), field_value(c, "H", 3)
    terms = [Term("memory", F64 * H * (D + 1) ** 2, "H")]
    if command == "derive":
        terms.append(Term("symbolic_states", H * (D + 1) + 3 * H, "D"))
    if command == "train":
        B = max(field_value(c, "batch", 512), field_value(c, "samples", 4096))
        terms.append(Term("memory", 4 * F64 * B * (D + 1) * (N + 1), "batch"))
    return terms
