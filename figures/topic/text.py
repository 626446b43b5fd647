"""The topic paper on real text (docs/papers/topic.md §5 items 1 and 7): the WikiText-2 ratios figure
and the claims decided on the same runs.

The protocol is :class:`empirical.topic.text.TopicTextConfig` (the paper row's ``text`` slot; one
masked-LM run and its initialisation per seed); it runs once per process and setting
(:func:`figures.realtext.results`, shared with the other papers). The claims are the registry
``text_claims.toml`` (docs/claims.md), decided over the seeds by :func:`text_claim_results`: one
map point per ambiguity threshold, the statistics :func:`min_log_ratio` (trained model) and
:func:`control_relative_gap` (the control: a seed-as-unit equivalence test, TOST by sign tests on
the initialisation's gap relative to the trained model's), concluded with
:func:`figures.claims.conclude`; each with its null control. Outside the regime (a quick run is not
a pretrained model) the claims are *untested*, with the measured cost of the full protocol. Without a
corpus the figure is skipped with a note and there are no real-text claims.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import matplotlib.pyplot as plt  # the Agg backend: figures/__init__ imports figures.core first
import numpy as np
import pandas as pd

from theory.topic import PAPER

from .. import style
from ..context import RunContext
from ..core import finish_figure, save_table
from ..realtext import corpus_available, results, runs_dir

__all__ = ["fig_topic_ratios", "text_claim_results", "decide", "text_registry", "min_log_ratio",
           "control_relative_gap", "other_seed_relative_gap", "null_values", "shuffled_min_log_ratio",
           "TEXT_CLAIMS", "STATS"]

#: the real-text claims (registry format, docs/claims.md), decided on the protocol's own runs
TEXT_CLAIMS = Path(__file__).with_name("text_claims.toml")
#: the three statistics of the paper's tables (columns ``<stat>_ratio``, ``<stat>_gap``, ...)
STATS = ("cosine", "dot", "attention")


def fig_topic_ratios(outdir, quick: bool = True, *, device: str = "auto",
                     ctx: RunContext | None = None) -> pd.DataFrame | None:
    """Same-topic / different-topic ratios (embedding cosine, dot product, attention) per
    threshold, trained masked LM vs its random initialisation: the mean over the protocol's seeds
    (table: ``wikitext_topic_ratios.csv``, every seed). None (and a note on stderr) without a
    corpus (``ctx.corpus``)."""
    ctx = RunContext.of(ctx, quick=quick, device=device)
    if not corpus_available(ctx.corpus):
        print(f"note: {PAPER}: no WikiText corpus at {ctx.corpus_dir()}; real-text figure skipped", file=sys.stderr)
        return None
    res = results(PAPER, ctx, store=runs_dir(outdir))
    df = res["table"]
    n_seeds = df["seed"].nunique()
    fig, axes = style.panels(3, size=(3.6, 2.9))
    names = {"cosine": "embedding cosine", "dot": "embedding dot product", "attention": "attention weight"}
    for ax, stat in zip(axes, ("cosine", "dot", "attention")):
        for model, kw in (("trained", style.role("practice")),
                          ("control", dict(color="0.3", linestyle="--", marker="s", markersize=3))):
            d = df[df["model"] == model].groupby("threshold", as_index=False)[f"{stat}_ratio"].mean()
            ax.plot(d["threshold"], d[f"{stat}_ratio"], **kw,
                    label=(f"masked LM, trained (mean of {n_seeds} seeds)" if model == "trained"
                           else "same model at its random init (control)"))
        ax.axhline(1, **style.role("reference"), label="no topic structure (ratio 1)")
        ax.set_xscale("log")
        ax.set_xlabel("fraction of words kept per topic")
        ax.set_title(names[stat], fontsize=9)
        ax.set_ylabel("ratio same / different topic")
    style.legend_outside(fig, axes, ncols=3)
    fig.suptitle(f"Topic ratios on WikiText-2 (LDA, {res['config'].num_topics} topics; masked LM)")
    finish_figure(fig, outdir, "wikitext_topic_ratios.png")
    save_table(df, outdir, "wikitext_topic_ratios.csv")
    return df


def min_log_ratio(table, config=None, *, threshold: float) -> float:
    """One seed's statistic of ``wikitext_topic_ratios_above_one``: the smallest over
    :data:`STATS` of ``log(<stat>_same / <stat>_diff)`` in the row of ``table`` (one seed's
    trained-model rows) at ``threshold``; NaN where a mean is not positive (no order to take a
    log of: the point stays undecided)."""
    row = _row(table, threshold)
    same = np.array([row[f"{s}_same"] for s in STATS], dtype=np.float64)
    diff = np.array([row[f"{s}_diff"] for s in STATS], dtype=np.float64)
    if not np.all((same > 0) & (diff > 0)):
        return float("nan")
    return float(np.min(np.log(same) - np.log(diff)))


def shuffled_min_log_ratio(table, config=None, *, threshold: float) -> float:
    """:func:`min_log_ratio` of the same rows with the words' topic labels shuffled (one
    permutation per seed, ``<stat>_shuffled_same/diff``): the trained-model claim's null (no topic
    structure in the labels, the same model and words)."""
    row = _row(table, threshold)
    same = np.array([row[f"{s}_shuffled_same"] for s in STATS], dtype=np.float64)
    diff = np.array([row[f"{s}_shuffled_diff"] for s in STATS], dtype=np.float64)
    if not np.all((same > 0) & (diff > 0)):
        return float("nan")
    return float(np.min(np.log(same) - np.log(diff)))


def control_relative_gap(table, config=None, *, threshold: float) -> float:
    """One seed's statistic of ``wikitext_topic_ratios_control_near_one``: for each of
    :data:`STATS`, the random initialisation's same-minus-different gap over the same seed's
    trained model's gap (``<stat>_gap``; each distinct embedding pair once), and of the three the
    one largest in absolute value, with its sign: the fraction of the trained model's topic
    structure already present at initialisation (0: none; 1: as much). ``table`` holds the seed's
    ``control`` and ``trained`` rows. NaN where the trained gap is not positive (no structure to
    measure the control against: the point stays undecided)."""
    c = _row(table[table["model"] == "control"], threshold)
    t = _row(table[table["model"] == "trained"], threshold)
    rel = []
    for s in STATS:
        g_t = float(t[f"{s}_gap"])
        if not (math.isfinite(g_t) and g_t > 0):
            return float("nan")
        rel.append(float(c[f"{s}_gap"]) / g_t)
    return float(rel[int(np.argmax(np.abs(rel)))])


def other_seed_relative_gap(table, config=None, *, threshold: float, other) -> float:
    """The control claim's null: :func:`control_relative_gap` with another seed's *trained*
    model (``other``: its rows) in place of the initialisation: a trained model is not "near
    one", so a criterion this passes does not discriminate."""
    swapped = other[other["model"] == "trained"].assign(model="control")
    return control_relative_gap(pd.concat([table[table["model"] == "trained"], swapped]), config, threshold=threshold)


def _row(table, threshold: float):
    rows = table[np.isclose(table["threshold"].astype(float), float(threshold), rtol=1e-9, atol=0)]
    if len(rows) != 1:
        raise ValueError(f"expected one row at threshold {threshold}, got {len(rows)}")
    return rows.iloc[0]


def text_registry():
    """The real-text claims' registry (``text_claims.toml``), validated (its runs are the
    protocol's, so there is no Config to check its map against)."""
    from ..claims.registry import load_registry

    return load_registry(TEXT_CLAIMS, paper=PAPER, resolve=True)


#: CPU cost of the full protocol, measured (one torch thread, 2-core machine): 0.21 s per
#: minibatch of the 4 x 4, 256-wide masked LM at 20 x 128 tokens, about 98 s per full evaluation
#: of the validation split (20 per run): ~6100 CPU-s per seed, ~20 core-hours for 12 seeds
FULL_PROTOCOL_COST = ("the full protocol (20000 minibatches of a 4-layer, 4-head, 256-wide masked LM, 12 seeds) "
                      "costs ~20 CPU core-hours (measured: 0.21 CPU-s per minibatch and ~98 CPU-s per validation "
                      "pass on one thread, 2-core CPU; GPU time not measured)")


def null_values(name, df, seeds, c, thr):
    """Per-seed values of the null control of claim ``name`` at threshold ``thr`` (the registry's
    ``null.runs``: the real-text claims' nulls are measured on the protocol's own runs, as their
    points are): the trained model with shuffled topic labels for the trained-model claim, the
    next seed's trained model for the control claim."""
    if name == "wikitext_topic_ratios_above_one":  # the trained model with the words' topic labels shuffled
        return [shuffled_min_log_ratio(df[(df["seed"] == s) & (df["model"] == "trained")], c, threshold=thr)
                for s in seeds]
    return [other_seed_relative_gap(df[df["seed"] == s], c, threshold=thr,
                                    other=df[df["seed"] == seeds[(i + 1) % len(seeds)]])
            for i, s in enumerate(seeds)]


_NULLS = {"wikitext_topic_ratios_above_one": "the same trained model with the words' topic labels shuffled (one permutation per seed)",
          "wikitext_topic_ratios_control_near_one": "another seed's trained model in place of the initialisation"}


def decide(res, quick: bool = True, level: float = 0.95) -> list:
    """The real-text claims (:class:`~figures.claims.ClaimResult`) on the protocol's results
    ``res`` (``config`` and ``table`` with a ``seed`` column): per claim one map point per
    threshold with one statistic value per seed (the seed is the unit), concluded by
    :func:`figures.claims.conclude` with its null control (the first threshold). Without an
    in-regime point (a quick run is not the pretrained model the claims are about) the verdict is
    *untested*, with why and what the full protocol costs (:data:`FULL_PROTOCOL_COST`)."""
    from ..claims import conclude, points_over_seeds

    c, df, reg = res["config"], res["table"], text_registry()
    seeds = sorted(df["seed"].unique().tolist())
    out = []
    for name, stat in (("wikitext_topic_ratios_above_one", _trained_stat),
                       ("wikitext_topic_ratios_control_near_one", control_relative_gap)):
        claim = reg.get(name)
        violated = tuple(f"{b.label or b.quantity} = {getattr(c, b.quantity):g}, regime {b.describe()}"
                         for b in claim.regime if not b.contains(getattr(c, b.quantity)))
        inside = not violated
        thresholds = [t for t in claim.map.axes[0].points(quick) if any(np.isclose(t, c.thresholds))]
        cells = [({"threshold": thr}, [stat(df[df["seed"] == s], c, threshold=thr) for s in seeds])
                 for thr in thresholds]
        points = points_over_seeds(claim, cells, lambda coords: (inside, violated), level)
        null = (_NULLS[name], {"threshold": thresholds[0]}, null_values(name, df, seeds, c, thresholds[0])) \
            if thresholds else None
        untested = "" if inside else (f"no in-regime point: the quick run is not the pretrained model the claim is "
                                      f"about ({'; '.join(violated)}); {FULL_PROTOCOL_COST}")
        out.append(conclude(claim, points, quick=quick, level=level, null=null, untested=untested))
    return out


def _trained_stat(table, config=None, *, threshold: float) -> float:
    return min_log_ratio(table[table["model"] == "trained"], config, threshold=threshold)


def text_claim_results(ctx: RunContext) -> list:
    """The real-text claims decided over the protocol's seeds (:func:`decide` on
    :func:`figures.realtext.results`, shared with the figure); untested (with how to get the corpus)
    when no corpus is present."""
    if not corpus_available(ctx.corpus):
        from ..realtext import no_corpus_claims

        return no_corpus_claims(text_registry(), quick=ctx.quick)
    return decide(results(PAPER, ctx), ctx.quick)
