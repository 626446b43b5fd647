"""figures.topic.text: the real-text claims (text_claims.toml) decided over seeds on synthetic
protocol tables (no WikiText needed): the statistics on known tables, a planted violation fails,
an in-regime toy holds, one seed or a quick (not pretrained) run stays inconclusive with the
reason; and the protocol's seeds on a tiny written corpus."""

import math
import re

import numpy as np
import pandas as pd
import pytest

from empirical.topic.text import TopicTextConfig
from figures.topic import text as T

STATS = ("cosine", "dot", "attention")


def _row(seed, model, thr, same, diff, z):
    """One protocol row: per statistic its same/diff means, ratio and gap z."""
    out = {"seed": seed, "model": model, "threshold": thr}
    for s, a, b, g in zip(STATS, same, diff, z):
        out.update({f"{s}_same": a, f"{s}_diff": b, f"{s}_ratio": a / b, f"{s}_gap_z": g})
    return out


def _res(config, trained_ratio, control_z, seeds=range(1, 6), noise=0.05):
    """A protocol result: every seed's trained rows with ratios ``trained_ratio`` (times a seeded
    jitter) and control rows with gap z-scores ``control_z`` (plus a seeded N(0, noise) draw)."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in seeds:
        for thr in config.thresholds:
            r = np.asarray(trained_ratio, dtype=float) * np.exp(rng.normal(0, noise, 3))
            rows.append(_row(seed, "trained", thr, 0.01 * r, [0.01] * 3, [5.0] * 3))
            z = np.asarray(control_z, dtype=float) + rng.normal(0, noise, 3)
            rows.append(_row(seed, "control", thr, [0.01] * 3, [0.01] * 3, z))
    return {"config": config, "table": pd.DataFrame(rows), "seconds": 1.0}


def _by_name(results):
    return {r.name: r for r in results}


def test_statistics_on_known_tables():
    table = pd.DataFrame([_row(1, "trained", 0.001, [0.2, 3.0, 0.02], [0.1, 1.0, 0.01], [1.0, -3.0, 2.0]),
                          _row(1, "trained", 0.002, [0.2, 3.0, 0.005], [0.1, 1.0, 0.01], [0.5, 0.1, -0.2])])
    assert T.min_log_ratio(table, threshold=0.001) == pytest.approx(math.log(2))  # cosine 2 < attention 2 = dot 3
    assert T.min_log_ratio(table, threshold=0.002) == pytest.approx(math.log(0.5))  # attention's 0.5
    assert T.max_abs_gap_z(table, threshold=0.001) == pytest.approx(3.0)
    assert T.max_abs_gap_z(table, threshold=0.002) == pytest.approx(0.5)
    negative = pd.DataFrame([_row(1, "control", 0.001, [-0.02, 3.0, 0.02], [0.01, 1.0, 0.01], [0.0] * 3)])
    assert math.isnan(T.min_log_ratio(negative, threshold=0.001))  # a negative mean has no log ratio
    with pytest.raises(ValueError, match="one row"):
        T.min_log_ratio(table, threshold=0.0005)


def test_registry_loads_with_both_claims():
    reg = T.text_registry()
    assert reg.names == ["wikitext_topic_ratios_above_one", "wikitext_topic_ratios_control_near_one"]
    from scipy.stats import norm  # the control's window is the null's 95 % bound of the largest of three |z|

    bound = norm.ppf(1 - (1 - 0.95 ** (1 / 3)) / 2)
    assert reg.get("wikitext_topic_ratios_control_near_one").criterion.boundary == pytest.approx(bound, abs=1e-4)


def test_in_regime_toy_holds():
    res = _by_name(T.decide(_res(TopicTextConfig.full(), [1.5, 1.4, 1.2], [0.3, -0.2, 0.1], seeds=range(1, 13)),
                            quick=False))
    trained, control = res["wikitext_topic_ratios_above_one"], res["wikitext_topic_ratios_control_near_one"]
    assert (trained.verdict, trained.regime_points, trained.seeds, trained.grade) == ("holds", 3, 12, "B")
    assert trained.interval[0] > 0 and trained.estimate == pytest.approx(math.log(1.2), abs=0.05)
    assert control.verdict == "holds" and control.interval[1] < 2.3877


def test_planted_violation_fails():
    res = _by_name(T.decide(_res(TopicTextConfig.full(), [0.8, 0.9, 0.7], [6.0, 5.5, -7.0]), quick=False))
    assert res["wikitext_topic_ratios_above_one"].verdict == "fails"
    assert res["wikitext_topic_ratios_above_one"].interval[1] < 0
    assert res["wikitext_topic_ratios_control_near_one"].verdict == "fails"
    assert "fails inside the regime" in res["wikitext_topic_ratios_control_near_one"].where_it_breaks


def test_one_seed_is_inconclusive():
    for r in T.decide(_res(TopicTextConfig.full(), [0.5, 0.5, 0.5], [9.0, 9.0, 9.0], seeds=[1]), quick=False):
        assert (r.verdict, r.regime_points, r.grade) == ("inconclusive", 0, "C")
        assert "1 seed(s): a verdict needs >= 5" in r.where_it_breaks


def test_quick_run_is_outside_the_trained_claims_regime():
    """The quick protocol (400 minibatches, one layer) is not a pretrained model: the trained claim
    stays inconclusive with the violated bounds and the measured values; the control (at init)
    is decided on its five seeds."""
    res = _by_name(T.decide(_res(TopicTextConfig.quick(), [0.5, 0.5, 0.5], [0.1, 0.2, -0.1]), quick=True))
    trained = res["wikitext_topic_ratios_above_one"]
    assert trained.verdict == "inconclusive" and trained.regime_points == 0
    assert "minibatches = 400, regime minibatches >= 2e+04; layers = 1, regime layers >= 4" in trained.where_it_breaks
    measured = re.search(r"threshold 0\.001: (\S+) \[(\S+), (\S+)\] \(5 of 5 seeds", trained.where_it_breaks)
    est, lo, hi = map(float, measured.groups())  # the measured mean (min of three jittered log 0.5) is reported
    assert lo <= est <= hi and est == pytest.approx(math.log(0.5), abs=0.1)
    # the points outside the regime are decided and shown on the map (ratios 0.5: below 1), not counted
    assert [(p.inside, p.verdict) for p in trained.points] == [(False, "fails")] * 3
    control = res["wikitext_topic_ratios_control_near_one"]
    assert (control.verdict, control.regime_points, control.seeds) == ("holds", 3, 5)
    doc = control.to_json()
    assert [p["coords"]["threshold"] for p in doc["map"]["points"]] == [0.0005, 0.001, 0.002]
    assert all(len(p["values"]) == 5 for p in doc["map"]["points"])


def _topic_corpus(folder, n_train=300, n_valid=40, seed=0):
    """Two topics' words (plus function words) in paragraphs of 24 tokens, one topic each."""
    from empirical import text

    rng = np.random.default_rng(seed)
    topics = [["frog", "toad", "lizard", "newt", "gecko"], ["mozart", "beethoven", "schubert", "haydn", "chopin"]]
    glue = ["the", "of", "and", "a", "in"]

    def lines(n):
        out = []
        for _ in range(n):
            words = topics[int(rng.integers(2))]
            out.append(" ".join(rng.choice(words) if rng.random() < 0.6 else rng.choice(glue) for _ in range(24)))
        return "\n".join(out)

    (folder / text.TRAIN_FILE).write_text(lines(n_train))
    (folder / text.VALID_FILE).write_text(lines(n_valid))
    return str(folder)


def test_protocol_runs_every_seed_and_a_seed_is_its_own(tmp_path):
    """The protocol on a tiny written two-topic corpus: one block of rows per seed (trained and
    control at each threshold); a seed's rows do not depend on the other seeds (seed 2 alone gives
    the same numbers); the seeds differ; two seeds leave both claims inconclusive."""
    corpus = _topic_corpus(tmp_path)
    small = dict(corpus=corpus, vocab_size=30, emsize=16, d_hid=16, bptt=8, batch_size=4, steps=6, log_every=3,
                 eval_chunks=1, attention_chunks=0, num_topics=2, passes=2, thresholds=(0.05, 0.1))
    from empirical.topic.text import topic_protocol

    both = topic_protocol(TopicTextConfig(seeds=(1, 2), **small), device="cpu")["table"]
    alone = topic_protocol(TopicTextConfig(seeds=(2,), **small), device="cpu")["table"]
    assert list(both[["seed", "model"]].itertuples(index=False, name=None)) == [
        (s, m) for s in (1, 2) for m in ("trained", "control") for _ in range(2)]
    cols = [f"{s}_{k}" for s in STATS for k in ("same", "diff", "gap_z")]
    pd.testing.assert_frame_equal(both[both["seed"] == 2][cols].reset_index(drop=True), alone[cols], rtol=1e-12)
    emb = [f"{s}_{k}" for s in ("cosine", "dot") for k in ("same", "diff")]  # finite (pairs of distinct words)
    assert np.isfinite(both[emb].to_numpy()).all()
    assert not np.allclose(both[both["seed"] == 1][emb].to_numpy(), alone[emb].to_numpy())
    res = {"config": TopicTextConfig(seeds=(1, 2), **small), "table": both, "seconds": 1.0}
    for r in T.decide(res, quick=True):
        assert r.verdict == "inconclusive" and "2 seed(s): a verdict needs >= 5" in r.where_it_breaks
