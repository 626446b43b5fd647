"""figures.topic.text: the real-text claims (text_claims.toml) decided over seeds on synthetic
protocol tables (no WikiText needed): the statistics on known tables, a planted violation fails,
an in-regime toy holds, one seed or a quick (not pretrained) run stays inconclusive with the
reason; and the protocol's seeds on a tiny written corpus."""

import math

import numpy as np
import pandas as pd
import pytest

from empirical.topic.text import TopicTextConfig
from figures.topic import text as T

STATS = ("cosine", "dot", "attention")


def _row(seed, model, thr, same, diff, jitter=(0.0, 0.0, 0.0)):
    """One protocol row: per statistic its same/diff means, ratio and gap, and the means under
    shuffled topic labels (both near the pooled mean: ``jitter`` is their relative difference)."""
    out = {"seed": seed, "model": model, "threshold": thr}
    for s, a, b, j in zip(STATS, same, diff, jitter):
        m = (a + b) / 2
        out.update({f"{s}_same": a, f"{s}_diff": b, f"{s}_ratio": a / b, f"{s}_gap": a - b,
                    f"{s}_shuffled_same": m * (1 + j), f"{s}_shuffled_diff": m})
    return out


def _res(config, trained_ratio, control_rel, seeds=range(1, 6), noise=0.05):
    """A protocol result: every seed's trained rows with ratios ``trained_ratio`` (times a seeded
    jitter; diff means 0.01) and control rows whose gaps are ``control_rel`` times the trained gaps
    (plus a seeded N(0, noise) draw)."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in seeds:
        for thr in config.thresholds:
            r = np.asarray(trained_ratio, dtype=float) * np.exp(rng.normal(0, noise, 3))
            rows.append(_row(seed, "trained", thr, 0.01 * r, [0.01] * 3, rng.normal(0, 0.02, 3)))
            rel = np.asarray(control_rel, dtype=float) + rng.normal(0, noise, 3)
            rows.append(_row(seed, "control", thr, 0.01 + rel * 0.01 * (r - 1), [0.01] * 3))
    return {"config": config, "table": pd.DataFrame(rows), "seconds": 1.0}


def _by_name(results):
    return {r.name: r for r in results}


def test_statistics_on_known_tables():
    table = pd.DataFrame([_row(1, "trained", 0.001, [0.2, 3.0, 0.02], [0.1, 1.0, 0.01]),
                          _row(1, "trained", 0.002, [0.2, 3.0, 0.005], [0.1, 1.0, 0.01]),
                          _row(1, "control", 0.001, [0.12, 1.5, 0.0105], [0.1, 1.0, 0.01]),
                          _row(1, "control", 0.002, [0.0, 0.0, 0.01], [0.1, 1.0, 0.01])])
    trained = table[table["model"] == "trained"]
    assert T.min_log_ratio(trained, threshold=0.001) == pytest.approx(math.log(2))  # cosine 2 < attention 2 = dot 3
    assert T.min_log_ratio(trained, threshold=0.002) == pytest.approx(math.log(0.5))  # attention's 0.5
    # control gaps over trained gaps: cosine 0.02/0.1, dot 0.5/2, attention 0.0005/0.01 -> the largest, 0.25
    assert T.control_relative_gap(table, threshold=0.001) == pytest.approx(0.25)
    assert math.isnan(T.control_relative_gap(table, threshold=0.002))  # trained attention gap < 0: no scale
    negative = pd.DataFrame([_row(1, "control", 0.001, [-0.02, 3.0, 0.02], [0.01, 1.0, 0.01])])
    assert math.isnan(T.min_log_ratio(negative, threshold=0.001))  # a negative mean has no log ratio
    with pytest.raises(ValueError, match="one row"):
        T.min_log_ratio(trained, threshold=0.0005)


def test_registry_loads_with_both_claims():
    reg = T.text_registry()
    assert reg.names == ["wikitext_topic_ratios_above_one", "wikitext_topic_ratios_control_near_one"]
    control = reg.get("wikitext_topic_ratios_control_near_one")
    assert (control.criterion.direction, tuple(control.criterion.boundary)) == ("inside", (-0.5, 0.5))
    assert control.statistic.estimator == "median" and control.practice == "standard transformer"


def test_in_regime_toy_holds_and_the_null_does_not():
    res = _by_name(T.decide(_res(TopicTextConfig.full(), [1.5, 1.4, 1.2], [0.1, -0.1, 0.05], seeds=range(1, 13)),
                            quick=False))
    trained, control = res["wikitext_topic_ratios_above_one"], res["wikitext_topic_ratios_control_near_one"]
    assert (trained.verdict, trained.regime_points, trained.seeds) == ("holds", 3, 12)
    assert trained.estimate == pytest.approx(math.log(1.2), abs=0.05)
    assert control.verdict == "holds"
    # the nulls: shuffled topic labels (ratios ~1), another seed's trained model as the control
    assert trained.null.verdict != "holds" and control.null.verdict != "holds"


def test_planted_violation_fails():
    res = _by_name(T.decide(_res(TopicTextConfig.full(), [0.8, 0.9, 0.7], [0.9, 0.8, 1.0], seeds=range(1, 13)),
                            quick=False))
    assert res["wikitext_topic_ratios_above_one"].verdict == "fails"
    # trained ratios < 1: the gaps are negative, the control has no scale (undecided), not a pass
    assert res["wikitext_topic_ratios_control_near_one"].verdict != "holds"
    res = _by_name(T.decide(_res(TopicTextConfig.full(), [1.5, 1.4, 1.2], [0.9, 0.8, 1.0], seeds=range(1, 13)),
                            quick=False))
    assert res["wikitext_topic_ratios_control_near_one"].verdict == "fails"  # the init holds the trained structure


def test_quick_run_is_untested_with_its_cost():
    """The quick protocol (400 minibatches, one layer) is not a pretrained model: both claims are
    untested, with the violated bounds and the full protocol's measured cost."""
    res = _by_name(T.decide(_res(TopicTextConfig.quick(), [0.5, 0.5, 0.5], [0.1, 0.2, -0.1]), quick=True))
    for r in res.values():
        assert r.verdict == "untested" and r.regime_points == 0
        assert "minibatches = 400, regime minibatches >= 2e+04" in r.untested_reason
        assert "CPU core-hours" in r.untested_reason
    doc = res["wikitext_topic_ratios_control_near_one"].to_json()
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
    cols = [f"{s}_{k}" for s in STATS for k in ("same", "diff", "gap", "perm_z")]
    pd.testing.assert_frame_equal(both[both["seed"] == 2][cols].reset_index(drop=True), alone[cols], rtol=1e-12)
    emb = [f"{s}_{k}" for s in ("cosine", "dot") for k in ("same", "diff")]  # finite (pairs of distinct words)
    assert np.isfinite(both[emb].to_numpy()).all()
    assert not np.allclose(both[both["seed"] == 1][emb].to_numpy(), alone[emb].to_numpy())
    res = {"config": TopicTextConfig(seeds=(1, 2), **small), "table": both, "seconds": 1.0}
    for r in T.decide(res, quick=True):
        assert r.verdict == "untested"
