"""figures.claims: the interval (coverage on data with a known mean, against closed forms), the
verdict at the boundary, < 5 seeds refused, the grade table, and the registry's errors."""

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import tiny.figures.claims as tiny_claims
from tiny.theory import TinyConfig
from figures.claims import decide, decide_exact, grade, interval
from figures.claims.registry import Criterion, load_registry
from theory import ConfigError

TINY_TOML = Path(tiny_claims.__file__).with_name("claims.toml")
BELOW0 = Criterion("below", 0.0, "a derivation of at least ten words that says why the boundary is zero here")


def test_median_interval_is_exact_on_a_skewed_law():
    """Order-statistic interval (each end a one-sided 0.975 bound): coverage of the median of any
    continuous law (here exponential, median ln 2) is 1 - 2 P(Bin(12, 1/2) <= k - 1) at the largest
    k with P(Bin <= k - 1) <= 0.025 (k = 3: 0.9614), 2000 data sets (3 sigma = 0.013)."""
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(2000):
        _, (lo, hi), method = interval(rng.exponential(1.0, 12), estimator="median", level=0.95)
        hits += lo <= math.log(2) <= hi
    assert method.startswith("exact sign test")
    assert abs(hits / 2000 - (1 - 2 * stats.binom.cdf(2, 12, 0.5))) < 0.013


def test_mean_interval_is_students_t():
    x = np.random.default_rng(0).normal(size=7)
    est, (lo, hi), _ = interval(x, estimator="mean", level=0.9)
    half = stats.t.ppf(0.95, 6) * x.std(ddof=1) / math.sqrt(7)
    assert est == pytest.approx(x.mean()) and (lo, hi) == pytest.approx((x.mean() - half, x.mean() + half))


def test_proportion_interval_is_clopper_pearson():
    # all 5 of 5: the exact lower bound solves p^5 = 0.025
    est, (lo, hi), _ = interval([1, 1, 1, 1, 1], estimator="proportion", level=0.95)
    assert est == 1 and hi == 1 and lo == pytest.approx(0.025 ** 0.2, rel=1e-9)
    with pytest.raises(ConfigError, match="0 or 1"):
        interval([1, 0, 0.5, 1, 1], estimator="proportion")


def test_interval_is_deterministic():
    x = np.random.default_rng(0).normal(size=7)
    assert interval(x) == interval(x)


@pytest.mark.parametrize("direction, boundary, lo, hi, verdict", [
    ("below", 0.0, -2.0, -1.0, "holds"), ("below", 0.0, 1.0, 2.0, "fails"), ("below", 0.0, -1.0, 1.0, "inconclusive"),
    ("below", 0.0, -1.0, 0.0, "inconclusive"), ("below", 0.0, 0.0, 1.0, "inconclusive"),
    ("above", 0.5, 0.6, 0.9, "holds"), ("above", 0.5, 0.1, 0.4, "fails"), ("above", 0.5, 0.5, 0.9, "inconclusive"),
    ("inside", (0.9, 1.1), 0.95, 1.05, "holds"), ("inside", (0.9, 1.1), 1.2, 1.3, "fails"),
    ("inside", (0.9, 1.1), 0.5, 0.8, "fails"), ("inside", (0.9, 1.1), 1.0, 1.2, "inconclusive"),
    ("inside", (0.9, 1.1), 0.8, 1.2, "inconclusive"),
])
def test_verdict_at_the_boundary(direction, boundary, lo, hi, verdict):
    assert Criterion(direction, boundary, "why").verdict(lo, hi) == verdict


def test_decide_over_seeds():
    """The sign test: 5 of 5 seeds on the holding side is p = 1/32 <= 0.05 (holds), 5 of 5 on the
    failing side fails; 4 of 5 is p = 6/32 either way (inconclusive); the interval is the one the
    tests read (its ends: order statistics)."""
    assert decide([-1.0, -1.1, -0.9, -1.05, -0.95], BELOW0).verdict == "holds"
    assert decide([1.0, 1.1, 0.9, 1.05, 0.95], BELOW0).verdict == "fails"
    d = decide([-1.0, -1.1, -0.9, -1.05, 0.95], BELOW0)
    assert d.verdict == "inconclusive" and d.p_holds == pytest.approx(6 / 32) and d.p_fails == pytest.approx(31 / 32)
    # seeds on the boundary count against the verdict tested: exactly on it is no verdict
    assert decide([0.0] * 5, BELOW0).verdict == "inconclusive"
    d = decide([-1e-3] * 6, BELOW0)
    assert d.verdict == "holds" and d.interval[1] == -1e-3 and d.method.startswith("exact sign test")
    # at a Holm level of 0.05/2, 5 of 5 on the failing side (p = 1/32) does not fail
    assert decide([1.0, 1.1, 0.9, 1.05, 0.95], BELOW0, fail_level=0.025).verdict == "inconclusive"
    assert decide_exact(-0.5, BELOW0).verdict == "holds" and decide_exact(0.5, BELOW0).verdict == "fails"


def test_no_verdict_from_fewer_than_five_seeds():
    for n in (1, 4):
        with pytest.raises(ConfigError, match="seeds: a verdict needs >= 5 seeds"):
            decide(np.full(n, -1.0), BELOW0)
    with pytest.raises(ConfigError, match="not finite"):
        decide([-1.0, np.nan, -1.0, -1.0, -1.0], BELOW0)


@pytest.mark.parametrize("seeds, points, g", [(12, 6, "A"), (40, 9, "A"), (11, 6, "B"), (12, 5, "B"), (5, 3, "B"),
                                              (4, 10, "C"), (5, 2, "C"), (100, 2, "C")])
def test_grade_table(seeds, points, g):
    assert grade(seeds, points) == g


# ------------------------------------------------------------------------------------------------
# The registry
# ------------------------------------------------------------------------------------------------
def _load(tmp_path, text, **kw):
    p = tmp_path / "claims.toml"
    p.write_text(text)
    return load_registry(p, paper="tiny", config=TinyConfig, **kw)


def test_tiny_registry_loads():
    reg = load_registry(TINY_TOML, paper="tiny", config=TinyConfig, resolve=True)
    c = reg.get("gap_shrinks")
    assert c.criterion.direction == "below" and c.criterion.boundary == pytest.approx(math.log(0.5))
    assert c.criterion.kind == "effect size" and c.practice == "the paper's network" and c.theory_exact
    assert c.null.settings == {"lr": 1e-6} and [d.coords for d in c.demos] == [{"lr": 0.5, "horizon": 200}]
    assert [a.name for a in c.map.axes] == ["lr", "horizon"] and c.map.seeds(True) == 7 and c.map.seeds(False) == 12
    assert c.regime[0].contains(2.0) and not c.regime[0].contains(2.01)
    assert c.protocol.config(TinyConfig, True).a0 == 0.5


_BASE = TINY_TOML.read_text()
_DERIVATION = _BASE[_BASE.index('derivation = """'):_BASE.index('[claims.gap_shrinks.map]')]


@pytest.mark.parametrize("old, new, field", [
    (_DERIVATION, "\n", "claims.gap_shrinks.criterion.derivation: missing"),
    (_DERIVATION, 'derivation = "from Theorem 1"\n\n', "claims.gap_shrinks.criterion.derivation: say in words"),
    (_DERIVATION, 'derivation = "TODO: derive this boundary from the theorem of the paper properly"\n\n',
     "claims.gap_shrinks.criterion.derivation"),
    ('direction = "below"', 'direction = "inside"', "claims.gap_shrinks.criterion.boundary"),
    ('direction = "below"', 'direction = "less"', "claims.gap_shrinks.criterion.direction"),
    ("falsifier =", "falsifer =", "claims.gap_shrinks.falsifer: unknown key"),
    ("range = [0.0, 2.0]", "range = [2.0, 0.0]", "claims.gap_shrinks.regime.0.range"),
    ("range = [0.0, 2.0]", "", "claims.gap_shrinks.regime.0: give exactly one"),
    ('quantity = "lr_curvature"', 'quantity = "nope"', "claims.gap_shrinks.regime.0.quantity"),
    ('name = "lr"', 'name = "lrate"', "claims.gap_shrinks.map.axes.0.name"),
    ('name = "horizon"', 'name = "steps"', "claims.gap_shrinks.map.axes.1.name"),
    ("quick = 7", "quick = 4", "claims.gap_shrinks.map.seeds.quick"),
    # the sign test over 6 in-regime points needs 2^-n <= 0.05/6: 5 seeds could never give 'fails'
    ("quick = 7", "quick = 5", "claims.gap_shrinks.map.seeds.quick: 5 seeds can never give 'fails'"),
    ('practice = "the paper\'s network"', 'practice = "a network"', "claims.gap_shrinks.practice"),
    ('theory_flow = "exact: ', 'theory_flow = "', "claims.gap_shrinks.theory_flow: must start with"),
    ('theory_flow = "exact: ', 'theory_flo = "', "claims.gap_shrinks.theory_flo: unknown key"),
    ("[claims.gap_shrinks.null]", "[claims.gap_shrinks.nul]", "claims.gap_shrinks.nul: unknown key"),
    ("at = { lr = 2.0, horizon = 200 }", "at = { lr = 32.0, horizon = 200 }",
     "claims.gap_shrinks.null.at: lies outside the regime"),
    ("at = { lr = 2.0, horizon = 200 }", "at = { lr = 2.0 }", "claims.gap_shrinks.null.at.horizon: missing"),
    ("settings = { lr = 1e-6 }", "", "claims.gap_shrinks.null: give settings"),
    ("coords = { lr = 0.5, horizon = 200 }", "coords = { lr = -1.0, horizon = 200 }",
     "claims.gap_shrinks.demo.0.coords: lr"),
    ('kind = "effect size"', 'kind = "hunch"', "claims.gap_shrinks.criterion.kind"),
    ("full = 12", "full = 8", "claims.gap_shrinks.map.seeds.full"),
    ("schema = 1", "schema = 2", "schema"),
    ('function = "tiny.figures.claims:log_gap_ratio"', 'function = "tiny.figures.claims.log_gap_ratio"',
     "claims.gap_shrinks.statistic.function"),
    ('estimator = "median"', 'estimator = "mode"', "claims.gap_shrinks.statistic.estimator"),
    ('estimator = "median"', 'estimator = "mean"', "claims.gap_shrinks.map.seeds.quick: the t-test of a mean needs >= 500"),
    ("settings = { a0 = 0.5 }", "settings = { p = 1.5 }", "claims.gap_shrinks.protocol"),
    ("quick = [0.5, 2.0, 8.0, 32.0]", "quick = [0.5, 2.0, 8.0]", "claims.gap_shrinks.map: every map point"),
    ('paper = "tiny"', 'paper = "scb"', "paper"),
    ("[claims.gap_shrinks]", "[claims.gap_shrinks", "registry"),
])
def test_registry_errors_name_the_field(tmp_path, old, new, field):
    assert old in _BASE
    with pytest.raises(ConfigError) as err:
        reg = _load(tmp_path, _BASE.replace(old, new, 1))
        from figures.claims import plan_claim  # the map's regime check needs the derived quantities
        from helpers.tiny_row import tiny_registered

        with tiny_registered():
            plan_claim(reg.claims[0])
    assert str(err.value).startswith(field), str(err.value)


def test_registry_resolves_references(tmp_path):
    text = _BASE.replace('"tiny.figures.claims:log_gap_ratio"', '"tiny.figures.claims:no_such_statistic"')
    _load(tmp_path, text)  # the text is valid ...
    with pytest.raises(ConfigError, match="claims.gap_shrinks.statistic: cannot resolve"):
        _load(tmp_path, text, resolve=True)  # ... the reference is not


def test_missing_registry_file(tmp_path):
    with pytest.raises(ConfigError, match="registry: no such file"):
        load_registry(tmp_path / "claims.toml")


def test_conclude_points_decided_outside_the_sweep():
    """figures.claims.conclude: map points a paper decided on its own runs get decide_claim's rule
    (any in-regime failure fails; holds only when every in-regime point holds); none inside the
    regime is untested, grade C, with the reason."""
    from figures.claims import MapPoint, conclude

    spec = load_registry(TINY_TOML, paper="tiny", config=TinyConfig, resolve=True).get("gap_shrinks")
    level = 1 - 0.05 / 3

    def point(x, values, inside=True):
        dec = decide(values, spec.criterion, level=level) if inside else None
        return MapPoint({"lr": x}, inside, () if inside else ("lr > 2",), tuple(values), dec)

    # 7 seeds: Holm's first step over 3 points tests at 0.05/3 > 2^-7 = 0.0078 (5 seeds could not fail)
    good, bad = [-1.0, -1.1, -0.9, -1.05, -0.95, -1.2, -0.8], [1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 0.8]
    held = conclude(spec, [point(0.1, good), point(0.2, good), point(0.3, good), point(3.0, bad, False)])
    assert held.verdict == "holds" and held.regime_points == 3 and held.grade == "B" and held.seeds == 7
    assert held.can_fire == {"holds": True, "fails": True}
    assert conclude(spec, [point(0.1, good[:5]), point(0.2, bad[:5]), point(0.3, good[:5])]).verdict == "inconclusive"
    assert held.point_level == pytest.approx(level)
    failed = conclude(spec, [point(0.1, good), point(0.2, bad), point(0.3, good)])
    assert failed.verdict == "fails" and failed.at == {"lr": 0.2}
    none = conclude(spec, [point(3.0, bad, False)], untested="runs shorter than the paper's: ~2 GPU-hours")
    assert none.verdict == "untested" and none.grade == "C" and none.regime_points == 0
    assert none.untested_reason == "runs shorter than the paper's: ~2 GPU-hours"
    assert none.where_it_breaks.startswith("untested: runs shorter")
    assert none.estimate == pytest.approx(np.median(bad))  # the outside point's statistic, as information
    # points outside the regime decided over their seeds: the one nearest the boundary is shown
    # (information; the verdict stays untested)
    far, near = [3.0, 3.1, 2.9, 3.05, 2.95], [0.2, 0.3, 0.1, 0.25, 0.15]
    shown = conclude(spec, [MapPoint({"lr": x}, False, ("lr > 2",), tuple(v), decide(v, spec.criterion, level=level))
                            for x, v in ((3.0, far), (4.0, near))])
    assert shown.verdict == "untested" and shown.grade == "C" and shown.at == {"lr": 4.0}
    assert shown.estimate == pytest.approx(np.median(near)) and shown.interval[0] < np.mean(near) < shown.interval[1]


def test_the_train_slot_runs_batched_equal_the_per_seed_runs_and_a_diverged_seed_has_no_run():
    """figures.claims.train_slot_runs: through the row's train_seeds (one call) the same runs as the
    train slot seed by seed; a batched seed with a non-finite logged value is None, as a Trainer run
    that diverges; a config the batched runner refuses trains seed by seed."""
    import dataclasses

    from figures.claims import train_slot_runs
    from figures.papers import get
    from theory import scb as tscb

    row = get("scb")
    cfg = tscb.SCBConfig(N=3, T=8, Q=2, eta_V=0.05, eta_A=0.1, batch=8, steps=30, log_every=5)
    seeds = [2, 5]
    batched = train_slot_runs(row, cfg, seeds)
    plain = train_slot_runs(dataclasses.replace(row, train_seeds=None), cfg, seeds)
    for b, p in zip(batched, plain):
        for k in tscb.CORRELATION_OBSERVABLES:
            np.testing.assert_allclose(b[k].values, p[k].values, rtol=1e-10, atol=1e-12)
        assert "minibatch_loss" in p and "minibatch_loss" not in b  # the two paths really differ

    def one_diverges(c, *, seeds, device):
        from empirical.scb.l1 import train_seeds

        out = train_seeds(c, seeds=seeds, device=device)
        v = out["value_transition_correlation"].values.copy()
        v[1, -1] = np.inf
        return out.assign(value_transition_correlation=(out["value_transition_correlation"].dims, v))

    runs = train_slot_runs(dataclasses.replace(row, train_seeds=one_diverges), cfg, seeds)
    assert runs[0] is not None and runs[1] is None
    softmax = train_slot_runs(row, cfg.replace(variant="softmax"), [0])  # not batched: the Trainer's run
    assert "minibatch_loss" in softmax[0]
