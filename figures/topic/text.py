"""The topic paper on real text (papers/topic.md §5 items 1 and 7): the WikiText-2 ratios figure
and the claims decided on the same runs.

The protocol is :class:`empirical.topic.text.TopicTextConfig` (the paper row's ``text`` slot; one
masked-LM run and its initialisation per seed); it runs once per process and setting
(:func:`figures.realtext.results`, shared with the other papers). The claims are the registry
``text_claims.toml`` (docs/claims.md), decided over the seeds by :func:`text_claim_results`: one
map point per ambiguity threshold, the statistics :func:`min_log_ratio` (trained model) and
:func:`max_abs_gap_z` (the control), concluded with :func:`figures.claims.conclude`. Without a
corpus the figure is skipped with a note and there are no real-text claims.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt  # the Agg backend: figures/__init__ imports figures.core first
import numpy as np
import pandas as pd

from empirical import text as corpus_text
from theory.topic import PAPER

from .. import style
from ..core import finish_figure, save_table
from ..realtext import corpus_available, results, runs_dir

__all__ = ["fig_topic_ratios", "text_claim_results", "decide", "text_registry", "min_log_ratio", "max_abs_gap_z",
           "TEXT_CLAIMS", "STATS"]

#: the real-text claims (registry format, docs/claims.md), decided on the protocol's own runs
TEXT_CLAIMS = Path(__file__).with_name("text_claims.toml")
#: the three statistics of the paper's tables (columns ``<stat>_ratio``, ``<stat>_gap_z``, ...)
STATS = ("cosine", "dot", "attention")


def fig_topic_ratios(outdir, quick: bool = True, *, device: str = "auto", corpus=None) -> pd.DataFrame | None:
    """Same-topic / different-topic ratios (embedding cosine, dot product, attention) per
    threshold, trained masked LM vs its random initialisation: the mean over the protocol's seeds
    (table: ``wikitext_topic_ratios.csv``, every seed). None (and a note on stderr) without a
    corpus."""
    if not corpus_available(corpus):
        print(f"note: {PAPER}: no WikiText corpus at {corpus_text.resolve_corpus(corpus)}; real-text figure skipped",
              file=sys.stderr)
        return None
    res = results(PAPER, quick, device, corpus, store=runs_dir(outdir))
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


def max_abs_gap_z(table, config=None, *, threshold: float) -> float:
    """One seed's statistic of ``wikitext_topic_ratios_control_near_one``: the largest over
    :data:`STATS` of ``|<stat>_gap_z|`` (the same-minus-different gap in standard errors) in the
    row of ``table`` (one seed's control rows) at ``threshold``."""
    row = _row(table, threshold)
    return float(np.max(np.abs([float(row[f"{s}_gap_z"]) for s in STATS])))


def _row(table, threshold: float):
    rows = table[np.isclose(table["threshold"].astype(float), float(threshold), rtol=1e-9, atol=0)]
    if len(rows) != 1:
        raise ValueError(f"expected one row at threshold {threshold}, got {len(rows)}")
    return rows.iloc[0]


def text_registry():
    """The real-text claims' registry (``text_claims.toml``), validated (its runs are the
    protocol's, so there is no Config to check its map against)."""
    from ..claims_registry import load_registry

    return load_registry(TEXT_CLAIMS, paper=PAPER, resolve=True)


#: each claim: (statistic, the model whose rows it reads)
_CLAIMS = {"wikitext_topic_ratios_above_one": (min_log_ratio, "trained"),
           "wikitext_topic_ratios_control_near_one": (max_abs_gap_z, "control")}


def decide(res, quick: bool = True, level: float = 0.95) -> list:
    """The real-text claims (:class:`~figures.claims.ClaimResult`) on the protocol's results
    ``res`` (``config`` and ``table`` with a ``seed`` column): per claim one map point per
    threshold of the quick or full map with one statistic value per seed; a point is decided
    (:func:`figures.claims.decide` at the simultaneous level over the map's points) where it has
    >= 5 seeds, all finite, else it stays undecided with the reason; the claim is
    :func:`figures.claims.conclude` of its points, whose verdict counts only the points inside the
    regime (a quick run outside it: inconclusive, with the measured values in ``where_it_breaks``)."""
    from ..claims import conclude, points_over_seeds

    c, df, reg = res["config"], res["table"], text_registry()
    seeds = sorted(df["seed"].unique().tolist())
    out = []
    for name, (stat, model) in _CLAIMS.items():
        claim = reg.get(name)
        violated = tuple(f"{b.label or b.quantity} = {getattr(c, b.quantity):g}, regime {b.describe()}"
                         for b in claim.regime if not b.contains(getattr(c, b.quantity)))
        inside = not violated
        thresholds = [t for t in claim.map.axes[0].points(quick) if any(np.isclose(t, c.thresholds))]
        # every point is decided at the simultaneous level over the map's points (as the registry's
        # maps decide points outside the regime too: they show where the claim breaks); only the
        # in-regime ones count towards the verdict (figures.claims.conclude)
        point_level = 1 - (1 - level) / max(len(thresholds), 1)
        cells = [({"threshold": thr}, [stat(df[(df["seed"] == s) & (df["model"] == model)], c, threshold=thr)
                                       for s in seeds]) for thr in thresholds]
        points = points_over_seeds(claim, cells, lambda coords: (inside, violated), point_level)
        r = conclude(claim, points, quick=quick, level=level)
        if r.regime_points == 0:
            r = replace(r, where_it_breaks=_undecided_note(claim, r, len(seeds), level))
        out.append(r)
    return out


def _undecided_note(claim, r, n_seeds: int, level: float) -> str:
    """Why a real-text claim stays inconclusive, with the measured values (their mean over the
    seeds and its interval per threshold where there are >= 2 seeds, at the level the claim
    would be decided at: what the verdict would read inside the regime)."""
    from ..claims import interval

    why = (f"{n_seeds} seed(s): a verdict needs >= 5" if n_seeds < 5 else
           "outside the regime (" + "; ".join(r.points[0].violated) + ")" if r.points and r.points[0].violated else
           "no decided point")
    parts = []
    point_level = 1 - (1 - level) / max(len(r.points), 1)
    for p in r.points:
        vals = [v for v in p.values if math.isfinite(v)]
        if len(vals) >= 2:
            est, (lo, hi), _ = interval(vals, level=point_level)
            parts.append(f"threshold {p.coords['threshold']:g}: {est:.3g} [{lo:.3g}, {hi:.3g}] "
                         f"({len(vals)} of {len(p.values)} seeds finite)")
        elif vals:
            parts.append(f"threshold {p.coords['threshold']:g}: {vals[0]:.3g} (one seed)")
        else:
            parts.append(f"threshold {p.coords['threshold']:g}: no finite value")
    return (f"not decided: {why}; measured {claim.statistic.name} (mean over seeds, {point_level:.4g} interval): "
            + "; ".join(parts))


def text_claim_results(quick: bool = True, device: str = "auto", corpus=None) -> list:
    """The real-text claims decided over the protocol's seeds (:func:`decide` on
    :func:`figures.realtext.results`, shared with the figure); ``[]`` when no corpus is present."""
    return decide(results(PAPER, quick, device, corpus), quick) if corpus_available(corpus) else []
