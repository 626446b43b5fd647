"""theory/scan_snap/config.py: validation, variants and presets."""

import numpy as np
import pytest

from theory import scan_snap as ss
from theory.errors import ConfigError


def test_variants_and_presets():
    """One variant field (the data path), checked by ParamsBase; the presets are the regimes the
    comparison's statements assume."""
    assert list(ss.Config.VARIANTS) == ["counts", "sequences"]
    assert ss.Config().replace(variant="sequences").variant == "sequences"
    with pytest.raises(ConfigError) as e:
        ss.Config(variant="tokens")
    assert e.value.field == "variant"
    with pytest.raises(ConfigError) as e:
        ss.Config.preset("paper")
    assert e.value.field == "preset"
    for name in ss.Config.PRESETS:
        for quick in (True, False):
            ss.Config.preset(name, quick)  # every preset is a valid config
    theory = ss.Config.preset("theory", quick=True)
    # inside the theory's regime: zero init, plain SGD (ODE time = step), count vectors, T >> |supp|
    assert theory.zero_init and theory.momentum == 0.0 and theory.variant == "counts" and theory.T == 4096
    np.testing.assert_array_equal(theory.ode_times(), theory.log_steps())
    official = ss.Config.preset("official", quick=False)  # the official Fig. 4 run (docs/papers/scan_snap.md §5.3)
    assert (official.T, official.batch, official.momentum, official.steps, official.K) == (128, 128, 0.9, 100, 2)
    fig6 = ss.Config.preset("fig6", num_last=3)  # Syn-Medium, default init (spec §5.4)
    assert (fig6.K, fig6.zero_init, fig6.steps, fig6.M_out) == (6, False, 100, 79)
    assert ss.Config.preset("theory", quick=False, steps=7).steps == 7


def test_config_validation():
    for kw, field in ((dict(num_unique_per_next=0), "num_unique_per_next"), (dict(eta_Y=0.0), "eta_Y"),
                      (dict(eta_Z=-1.0), "eta_Z"), (dict(M=1, num_last=2), "M"), (dict(T=1), "T"),
                      (dict(vocab="x"), "vocab"), (dict(momentum=1.0), "momentum"), (dict(num_last=0), "num_last")):
        with pytest.raises(ConfigError) as e:
            ss.Config(**kw)
        assert e.value.field == field
