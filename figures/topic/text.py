"""The topic paper on real text (papers/topic.md §5 items 1 and 7): the WikiText-2 ratios figure
and the claims decided on the same run.

The protocol is :class:`empirical.topic.text.TopicTextConfig` (the paper row's ``text`` slot); it
runs once per process and setting (:func:`figures.realtext.results`, shared with the other
papers). Without a corpus the figure is skipped with a note and there are no real-text claims.
"""

from __future__ import annotations

import sys

import matplotlib.pyplot as plt  # the Agg backend: figures/__init__ imports figures.core first
import pandas as pd

from empirical import text as corpus_text
from theory.topic import PAPER

from .. import style
from ..core import finish_figure, save_table
from ..realtext import corpus_available, results, runs_dir, text_regime
from ..report import Claim

__all__ = ["fig_topic_ratios", "claims", "decide"]


def fig_topic_ratios(outdir, quick: bool = True, *, device: str = "auto", corpus=None) -> pd.DataFrame | None:
    """Same-topic / different-topic ratios (embedding cosine, dot product, attention) per
    threshold, trained masked LM vs its random initialisation (table:
    ``wikitext_topic_ratios.csv``). None (and a note on stderr) without a corpus."""
    if not corpus_available(corpus):
        print(f"note: {PAPER}: no WikiText corpus at {corpus_text.resolve_corpus(corpus)}; real-text figure skipped",
              file=sys.stderr)
        return None
    res = results(PAPER, quick, device, corpus, store=runs_dir(outdir))
    df = res["table"]
    fig, axes = style.panels(3, size=(3.3, 2.7))
    names = {"cosine": "embedding cosine", "dot": "embedding dot product", "attention": "attention weight"}
    for ax, stat in zip(axes, ("cosine", "dot", "attention")):
        for model, kw in (("trained", style.role("practice")),
                          ("control", dict(color="0.3", linestyle="--", marker="s", markersize=3))):
            d = df[df["model"] == model]
            ax.plot(d["threshold"], d[f"{stat}_ratio"], **kw,
                    label="masked LM, trained" if model == "trained" else "same model at its random init (control)")
        ax.axhline(1, **style.role("reference"), label="no topic structure (ratio 1)")
        ax.set_xscale("log")
        ax.set_xlabel("fraction of words kept per topic")
        ax.set_ylabel(f"{names[stat]}: same / different topic")
    style.legend_outside(fig, axes, ncols=3)
    fig.suptitle(f"Topic ratios on WikiText-2 (LDA, {res['config'].num_topics} topics; masked LM)")
    finish_figure(fig, outdir, "wikitext_topic_ratios.png")
    save_table(df, outdir, "wikitext_topic_ratios.csv")
    return df


def decide(res) -> list[Claim]:
    """The real-text claims decided on the protocol's results ``res`` (numbers in ``evidence``)."""
    c, df = res["config"], res["table"]
    stats = ("cosine", "dot", "attention")
    ev = lambda d, key: {f"{s}_{key}": list(d[f"{s}_{key}"]) for s in stats}  # noqa: E731
    tr, ct = df[df["model"] == "trained"], df[df["model"] == "control"]
    regime = text_regime(res, f"; masked LM {c.n_layer} layer(s), Adam {c.lr:g}, LDA {c.num_topics} topics "
                              f"(scikit-learn online VB, {c.passes} passes), thresholds {list(c.thresholds)}, "
                              f"words per threshold {list(tr['n_words'])}")
    trained = Claim("wikitext_topic_ratios_above_one", "After masked-LM training, same-topic / different-topic "
                    "ratios of embedding cosine, dot product and attention weight are > 1",
                    bool(all((tr[f"{s}_ratio"] > 1).all() for s in stats)), {**ev(tr, "ratio"), **ev(tr, "gap_z")}, regime)
    control = Claim("wikitext_topic_ratios_control_near_one", "A randomly initialised model shows no topic structure "
                    "(ratios ~ 1: same-topic minus different-topic gap within 2 standard errors of 0)",
                    bool(all((ct[f"{s}_gap_z"].abs() < 2).all() for s in stats)), {**ev(ct, "ratio"), **ev(ct, "gap_z")},
                    regime)
    return [trained, control]


def claims(quick: bool = True, device: str = "auto", corpus=None) -> list[Claim]:
    """The real-text claims (:func:`decide` on :func:`figures.realtext.results`); ``[]`` when no
    corpus is present."""
    return decide(results(PAPER, quick, device, corpus)) if corpus_available(corpus) else []
