"""theory/joma/config.py: validation names the field, the variant mechanism (VARIANT_DEFAULTS,
VARIANT_ONLY derived from what each variant reads, N = K), presets, the time unit."""

import numpy as np
import pytest

from theory import joma as J
from theory.errors import ConfigError


@pytest.mark.parametrize("field,value", [("temperature", 0.0), ("temperature", -1.0), ("K", 0), ("rho", 1.5),
                                         ("p_top", -0.1), ("depth", 0), ("attention", "cubic"), ("d", 3)])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ConfigError) as e:
        J.JomaConfig().replace(**{field: value})
    assert e.value.field == field or (field == "K" and e.value.field in ("K", "N"))


def test_every_setting_reaches_its_variant_and_ignored_ones_are_errors():
    cfg = J.JomaConfig(lr=0.5, steps=7)
    for v in J.JomaConfig.VARIANTS:
        bound = cfg.replace(variant=v)
        assert bound.lr == 0.5 and bound.steps == 7 and bound.variant == v
    # unset fields follow the variant's defaults
    assert J.JomaConfig().replace(variant="probe").temperature == J.JomaConfig.VARIANT_DEFAULTS["probe"]["temperature"]
    with pytest.raises(ConfigError) as e:
        J.JomaConfig(Mc=4, d=8).replace(variant="hier")
    assert e.value.field in ("Mc", "d")
    with pytest.raises(ConfigError) as e:
        J.JomaConfig(hidden=7).replace(variant="fixed")
    assert e.value.field == "hidden"


def test_variant_only_is_derived_from_what_each_variant_reads():
    """VARIANT_ONLY (the base mechanism's table) names exactly the variants that read a field: every
    listed variant accepts a moved value of it, every other one refuses it; N follows K unless set."""
    C = J.JomaConfig
    moved = {"attention": "softmax", "activation": "tanh", "Mc": 5, "K": 2, "N": 2, "d": 13, "temperature": 0.7,
             "data": "random", "gradient": "random", "init_scale": 0.1, "batch": 2, "data_seed": 3, "depth": 3,
             "branching": 3, "rho": 0.5, "p_top": 0.4, "hblt_samples": 64, "seq_len": 9, "n_per_class": 5, "width": 8,
             "hidden": 6, "nlayer": 1, "wd": 0.0, "vocab": 12, "num_tokens": (6, 3), "num_combinations": (2, 1),
             "n_test": 32, "top": "fixed", "replacement": False}
    assert set(C.VARIANT_ONLY) == set(moved)
    for field, value in moved.items():
        for v in C.VARIANTS:
            extra = {"K": 2} if field == "N" else {}  # the centred G and the CE toy need N == K
            if v in C.VARIANT_ONLY[field]:
                assert getattr(C(variant=v, **{field: value}, **extra), field) == value, (field, v)
            else:
                with pytest.raises(ConfigError) as e:
                    C(variant=v, **{field: value})
                assert e.value.field == field, (field, v)
    assert C(K=5).N == 5 and C(K=5).replace(lr=0.1).N == 5 and C(K=2, N=2).replace(K=2).N == 2
    assert C(K=4, N=6, gradient="random").replace(K=3).N == 6  # an explicit N stays


def test_presets_are_the_figures_settings():
    """Config.preset: the official Figs. 2-3 toy (docs/papers/joma.md §5), the probe, the headline and Table 1."""
    toy = J.JomaConfig.preset("toy", quick=False)
    assert (toy.variant, toy.attention, toy.Mc, toy.K, toy.N, toy.d, toy.temperature, toy.lr, toy.init_scale,
            toy.steps) == ("ce", "softmax", 20, 20, 20, 30, 0.5, 0.1, 0.01, 2000)
    assert J.JomaConfig.preset("toy", data="random", activation="relu").steps == 1000
    assert J.JomaConfig.preset("headline") == J.JomaConfig(variant="mixture")
    assert (J.JomaConfig.preset("hier").steps, J.JomaConfig.preset("hier", quick=False).steps) == (150, 600)
    with pytest.raises(ConfigError) as e:
        J.JomaConfig.preset("nope")
    assert e.value.field == "preset"


def test_time_unit_is_lr_times_step_and_problem_uses_the_log_grid():
    cfg = J.JomaConfig(lr=0.02, steps=50, log_every=15)
    np.testing.assert_array_equal(cfg.log_steps(), [0, 15, 30, 45, 50])
    np.testing.assert_allclose(cfg.ode_times(), 0.02 * np.array([0, 15, 30, 45, 50]), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(J.problem(cfg).t, cfg.ode_times())
    assert J.JomaConfig(variant="hier").ode_time(40) == 40.0  # Adam: no gradient-flow time


def test_hierarchy_levels_are_integers():
    """num_tokens / num_combinations: integral values become ints (JSON and --set may give 8.0); a
    fraction or a bare number is a ConfigError naming the field."""
    cfg = J.JomaConfig(variant="hier", num_tokens=(8.0, 4), num_combinations=[2, 2.0])
    assert cfg.num_tokens == (8, 4) and cfg.num_combinations == (2, 2)
    assert all(type(v) is int for v in cfg.num_tokens + cfg.num_combinations)
    for bad in ((8.5, 4), 8):
        with pytest.raises(ConfigError) as e:
            J.JomaConfig(variant="hier", num_tokens=bad)
        assert e.value.field == "num_tokens"
