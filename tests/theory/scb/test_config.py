"""SCBConfig (theory/scb/config.py): validation, variants, presets."""

import pytest

from theory import scb
from theory.errors import ConfigError


def test_config_validation_names_fields():
    for kw, field in [({"Q": 0}, "Q"), ({"Q": 9, "T": 8}, "Q"), ({"eta_A": -0.1}, "eta_A"), ({"batch": 0}, "batch"),
                      ({"P": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), (0.0, 0.0, 0.1))}, "P"), ({"N": 1}, "N")]:
        with pytest.raises(ConfigError) as info:
            scb.SCBConfig(**kw)
        assert info.value.field == field
    with pytest.raises(ConfigError, match="unknown"):
        scb.SCBConfig().with_overrides(["nope=1"])
    with pytest.raises(ConfigError, match="variant"):
        scb.SCBConfig(variant="adam")


def test_replace_keeps_an_explicit_transition_matrix():
    """``P`` defaults to None without being a per-variant default: replace() must keep it."""
    P = ((0.5, 0.2, 0.3), (0.25, 0.5, 0.25), (0.25, 0.3, 0.45))
    cfg = scb.SCBConfig(P=P)
    assert cfg.replace(eta_V=0.1).P == P
    assert cfg.replace(variant="sgd").P == P


def test_presets_are_the_regimes_the_figures_used():
    """The presets replace compare_regime/overlay_config and the inline configs of the figures and
    the l1 study; their settings are those (docs/papers/scb.md §6)."""
    C = scb.SCBConfig
    base = dict(N=3, T=16, Q=2, eta_V=0.05, eta_A=0.05, steps=600, log_every=5)
    assert C.preset("compare") == C(**base, batch=4096)
    assert C.preset("compare", quick=False) == C(**base, batch=16384)
    assert C.preset("overlay") == C(N=3, T=8, Q=2, eta_V=0.1, eta_A=0.1, batch=32, steps=300, log_every=10)
    assert C.preset("overlay", quick=False) == C(**{**base, "log_every": 10}, batch=64)
    assert C.preset("softmax_vs_linear").batch == 256 and C.preset("softmax_vs_linear", quick=False).steps == 6000
    assert (C.preset("escape_time").batch, C.preset("escape_time", quick=False).batch) == (512, 2048)
    assert C.preset("transfer", T=8).task_seed == 1 and C.preset("l1_study").lam_switch == 2.0
    with pytest.raises(ConfigError, match="preset"):
        C.preset("nope")
