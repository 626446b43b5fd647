"""theory/limits.py: resource estimates refuse a run that cannot finish, naming the field that
causes the largest term; --allow-large lifts the refusal; the paper's estimator adds its terms."""

import math
from dataclasses import dataclass

import pytest

from theory.errors import ConfigError
from theory.limits import COMMANDS, LIMITS, Term, check, estimate, field_value


@dataclass(frozen=True)
class _Cfg:
    steps: int = 100
    log_every: int = 10
    N: int = 3

    def ode_time(self, step):
        return 0.5 * step


def test_generic_terms_follow_the_config():
    est = estimate("p", _Cfg(), "sde", paths=4, dt=0.25)
    assert est["log_points"] == [Term("log_points", 100 / 10 + 2, "steps")]
    # the SDE horizon is the config's own ode_time(steps) = 50, in steps of dt
    assert est["sde_steps"][0].amount == 50 / 0.25 and est["sde_path_steps"][0].amount == 4 * 200
    assert "train_steps" in estimate("p", _Cfg(), "train") and "sde_steps" not in estimate("p", _Cfg(), "train")
    with pytest.raises(ValueError, match="command must be one of"):
        estimate("p", _Cfg(), "plot")
    assert set(COMMANDS) == {"derive", "simulate", "sde", "train"}


def test_refusal_names_the_largest_terms_field_and_allow_large_lifts_it():
    def estimator(cfg, command, paths):
        return [Term("memory", cfg.N**3 * 8.0, "N"), Term("memory", 1.0, "steps")]

    assert check("p", _Cfg(N=10), "simulate", estimator=estimator)["memory"] > 8000
    huge = _Cfg(N=10**5)
    with pytest.raises(ConfigError) as info:
        check("p", huge, "simulate", estimator=estimator, limits={"memory": 2**30})
    assert info.value.field == "N"  # 8 N^3 bytes = 8e15 B = 7.45e6 GiB
    assert info.value.message == ("needs an estimated 7.45e+06 GiB of memory (limit 1 GiB; pass --allow-large "
                                  "to run anyway)")
    totals = check("p", huge, "simulate", estimator=estimator, limits={"memory": 2**30}, allow_large=True)
    assert totals["memory"] == pytest.approx(8e15 + 1 + 64 * 8 * 12)
    with pytest.raises(ConfigError, match="^steps: needs an estimated 1e\\+09 optimiser steps"):
        check("p", _Cfg(steps=10**9, log_every=10**9), "train")
    assert LIMITS["train_steps"] == 1e8


def test_field_value_never_overflows():
    assert field_value(_Cfg(), "N") == 3.0 and field_value(_Cfg(), "absent", 7) == 7.0
    assert math.isinf(field_value(_Cfg(N=10**400), "N"))
