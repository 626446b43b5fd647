"""theory/params.py: the Config base — one variant mechanism (VARIANTS, VARIANT_ONLY,
VARIANT_DEFAULTS, VARIANT_FIXED), one preset mechanism (PRESETS + preset()), ``--set`` parsing and
typing (property tests over every paper's Config), the logging grid."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from figures.papers import PAPERS
from theory.errors import ConfigError
from theory.params import ALL_VARIANTS, ParamsBase, Preset, log_steps

BIG = "1" + "0" * 400  # an integer beyond float range


@dataclass(frozen=True)
class Toy(ParamsBase):
    """A config with every piece of the variant and preset mechanisms."""

    VARIANTS = {"plain": "plain SGD", "prox": "proximal SGD", "frozen": "V frozen"}
    VARIANT_ONLY = {"lam": ("prox",)}
    VARIANT_DEFAULTS = {ALL_VARIANTS: {"lr": 0.1, "dims": [2, 3]}, "prox": {"lr": 0.5}}
    VARIANT_FIXED = {"frozen": {"train_v": False}}
    PRESETS = {
        "paper": Preset("the paper's regime (§5)", quick={"steps": 10}, full={"steps": 1000}),
        "overlay": Preset("same in quick and full", quick=lambda cls: {"steps": 7, "variant": "prox"}),
    }

    variant: str = "plain"
    lr: float | None = None
    dims: tuple[int, ...] | None = None
    lam: float = 0.0
    train_v: bool = True
    steps: int = 100
    log_every: int = 10

    def validate(self):
        if self.lr <= 0:
            raise ConfigError("lr", f"must be > 0, got {self.lr}")

    def ode_time(self, step):
        return float(step) * self.lr


def test_variant_defaults_resolve_and_follow_the_variant():
    assert (Toy().lr, Toy().dims) == (0.1, (2, 3))  # "*" defaults (lists become tuples)
    assert Toy(variant="prox").lr == 0.5  # a per-variant default beats "*"
    c = Toy().replace(variant="prox")
    assert c.lr == 0.5 and "lr" not in c.explicit  # not set: follows the new variant
    d = Toy(lr=0.3).replace(variant="prox")
    assert d.lr == 0.3 and "lr" in d.explicit  # set explicitly: kept
    assert Toy(lr=0.3).variant_default("lr") == 0.1 and Toy().variant_default("lr", "prox") == 0.5
    with pytest.raises(ConfigError, match="^variant: must be one of plain, prox, frozen"):
        Toy(variant="nope")


def test_a_setting_the_variant_ignores_is_an_error():
    assert Toy(variant="prox", lam=0.2).lam == 0.2
    assert not Toy().variant_reads("lam") and Toy().variant_reads("lam", "prox") and Toy().variant_reads("lr")
    with pytest.raises(ConfigError, match="^lam: is ignored by variant 'plain' \\(used only by prox\\)"):
        Toy(lam=0.2)
    with pytest.raises(ConfigError, match="^lam: "):
        Toy(variant="prox", lam=0.2).replace(variant="plain")  # never silently dropped


def test_fixed_settings_are_imposed_and_released():
    f = Toy(variant="frozen")
    assert f.train_v is False
    for attempt in (lambda: f.with_overrides(["train_v=True"]), lambda: f.replace(train_v=True),
                    lambda: Toy().replace(variant="frozen", train_v=True)):
        with pytest.raises(ConfigError, match="^train_v: variant 'frozen' fixes train_v=False"):
            attempt()  # an override the variant would overwrite is refused, never dropped
    assert f.replace(variant="plain").train_v is True  # the value frozen imposed is not a setting of plain


def test_presets_quick_full_and_changes():
    assert Toy.preset("paper").steps == 10 and Toy.preset("paper", quick=False).steps == 1000
    o = Toy.preset("overlay", quick=False, lam=0.1)  # full = quick when not given; changes on top
    assert (o.steps, o.variant, o.lr, o.lam) == (7, "prox", 0.5, 0.1)
    with pytest.raises(ConfigError, match="^preset: Toy has no preset 'nope'; known: paper, overlay"):
        Toy.preset("nope")


def test_overrides_are_typed_and_validated():
    c = Toy().with_overrides(["steps=20", "dims=[4, 5]", "lr=1"])
    assert (c.steps, c.dims, c.lr) == (20, (4, 5), 1.0) and type(c.lr) is float
    assert c.log_steps().tolist() == [0, 10, 20] and c.ode_times().tolist() == [0.0, 10.0, 20.0]
    for bad, field in (("lr=-1", "lr"), ("nope=1", "nope"), ("steps", "set")):
        with pytest.raises(ConfigError, match=f"^{field}: "):
            Toy().with_overrides([bad])
    assert Toy.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    with pytest.raises(ConfigError, match="^from: Toy has no field"):
        Toy.from_dict({"nope": 1}, field="from")


def test_log_steps_include_last_step_when_log_every_does_not_divide():
    np.testing.assert_array_equal(log_steps(10, 4), [0, 4, 8, 10])
    np.testing.assert_array_equal(log_steps(8, 4), [0, 4, 8])
    with pytest.raises(ConfigError, match="log_every"):
        log_steps(8, 0)


# ------------------------------------------------------------------------------------------------
# Property tests: every paper's config validation (``--set`` typing, log_steps)
# ------------------------------------------------------------------------------------------------
def _configs():
    import dataclasses

    out = []
    for row in PAPERS.values():
        C = row.Config
        for f in dataclasses.fields(C):
            if (f.type if isinstance(f.type, str) else f.type.__name__) in ("int", "float", "bool"):
                out.append((row.name, C, f.name, f.type if isinstance(f.type, str) else f.type.__name__))
    return out


_values = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1e400", "-1e400", BIG, "nan", "inf", "True", "[1, 2]", "'x'", "", "None", "3.5", "0"]),
    st.text(max_size=8),
)


@pytest.mark.parametrize("paper, Config, name, kind", _configs(), ids=[f"{c[0]}.{c[2]}" for c in _configs()])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_values)
def test_set_either_gives_a_typed_field_or_names_it(paper, Config, name, kind, raw):
    """``--set name=raw`` yields a valid config holding a value of the field's type, or a
    ConfigError naming that field (or a field it is checked against, quoting it) — never another
    exception."""
    try:
        cfg = Config().with_overrides([f"{name}={raw}"])
    except ConfigError as err:
        # a cross-field rule may name the other field, but then says which value it compared
        assert err.field == name or name in err.message, (err.field, str(err))
        return
    v = getattr(cfg, name)
    assert type(v) is {"int": int, "float": float, "bool": bool}[kind]
    if name == "seed" or name.endswith("_seed"):
        assert 0 <= v < 2**32
    assert Config.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg  # round trip (provenance)


@settings(max_examples=60, deadline=None)
@given(steps=st.integers(1, 10**5), every=st.integers(1, 10**4))
def test_log_steps_invariants(steps, every):
    g = log_steps(steps, every)
    assert g[0] == 0 and g[-1] == steps and (g.dtype.kind == "i")
    d = g[1:] - g[:-1]
    assert (d > 0).all() and (d[:-1] == every).all() and d[-1] <= every
