"""The tiny paper's Config: every setting of every variant, the time unit, the presets."""

from __future__ import annotations

from dataclasses import dataclass

from theory import ConfigError, ParamsBase
from theory.limits import F64, Term
from theory.params import Preset

__all__ = ["PAPER", "SPEC", "TinyConfig", "estimate"]

PAPER = "tiny"
SPEC = "tests/tiny/__init__.py"


@dataclass(frozen=True)
class TinyConfig(ParamsBase):
    """Time unit: one optimiser step (the learning rate is inside the ODE), so ``ode_time(step) =
    step``; the Trainer, the problem and any SDE all read their times from here."""

    VARIANTS = {"sgd": "minibatch SGD on sampled labels", "exact": "gradient descent on the expected loss"}
    VARIANT_ONLY = {"batch": ("sgd",)}  # the exact gradient draws no labels: a batch setting is an error
    PRESETS = {"compare": Preset("the comparison regime: SGD, batch 256",
                                 quick={"steps": 200}, full={"steps": 2000, "log_every": 50})}

    variant: str = "sgd"
    p: float = 0.8
    lr: float = 0.5
    a0: float = 0.0
    batch: int = 256
    steps: int = 200
    log_every: int = 10
    seed: int = 0

    def validate(self):
        if not 0 < self.p < 1:
            raise ConfigError("p", f"must lie in (0, 1), got {self.p}")
        if self.lr <= 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")
        if self.batch < 1:
            raise ConfigError("batch", f"must be >= 1, got {self.batch}")

    def ode_time(self, step):
        return float(step)


def estimate(config: TinyConfig, command: str, paths: int) -> list[Term]:
    """Resource terms beyond the generic ones (the row's ``estimate`` slot): a minibatch of labels."""
    return [Term("memory", F64 * config.batch, "batch")] if command == "train" else []
