"""Real-text figures, CSVs and claims of Scan & Snap and Topic (issue 10), and the machinery every
paper's real-text figures share (:func:`results`, :func:`config_for`, :func:`text_regime`; JoMA's
figures and claims: :mod:`figures.joma.text`).

:func:`make_realtext_figures` writes ``figures/out/<paper>/wikitext_*.png`` and ``wikitext_*.csv``;
:func:`claims_for` decides the papers' real-text claims from the same runs (each protocol runs at
most once per process and setting: :func:`results`). Each ``fig_*`` returns the data it plotted.
The protocols and their quick / full presets are in :mod:`empirical.realtext`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from empirical import text  # noqa: E402
from theory.errors import ConfigError, check_choice  # noqa: E402

from .core import finish_figure, save_table  # noqa: E402
from .report import Claim  # noqa: E402
from .sweep import sweep_settings, using_sweep  # noqa: E402,F401  (using_sweep: re-exported)

__all__ = ["make_realtext_figures", "claims_for", "corpus_available", "paper_realtext_figures",
           "paper_realtext_claims", "results", "config_for", "text_regime", "fig_scan_snap_maps",
           "fig_scan_snap_entropy_vs_lr", "fig_topic_ratios", "using_sweep", "RUNS_DIR"]

def text_papers() -> tuple[str, ...]:
    """The papers whose row fills the ``text`` slot (a real-text protocol)."""
    from .papers import PAPERS

    return tuple(name for name, row in PAPERS.items() if row.text is not None)


def config_for(paper: str, quick: bool, corpus: str | None = None):
    """The protocol config of ``paper`` (its row's ``text`` slot; quick or full preset) on
    ``corpus`` (None: the default)."""
    from .papers import get

    check_choice("paper", paper, text_papers())
    cls = get(paper).slot("text")
    return (cls.quick if quick else cls.full)(corpus=str(text.check_corpus(corpus)))


_CACHE: dict[tuple, dict[str, Any]] = {}
#: the default store of a figure's runs: this folder under the figure's outdir
RUNS_DIR = "wikitext_runs"


def _runs_dir(outdir) -> Path | None:
    return None if outdir is None else Path(outdir) / RUNS_DIR


def results(paper: str, quick: bool = True, device: str = "auto", corpus: str | None = None, *,
            store: str | Path | None = None) -> dict[str, Any]:
    """The protocol's results, run once per process and setting (paper, preset, device, corpus).
    Its runs are sweep cells kept in a store: :func:`using_sweep`'s ``DIR/<paper>``, else
    ``store`` (the figures pass ``<outdir>/wikitext_runs``), else a temporary folder; the store,
    workers and Ray change where runs are computed, never their numbers."""
    key = (paper, quick, device, str(text.check_corpus(corpus)))
    if key not in _CACHE:
        cfg = config_for(paper, quick, key[3])
        opts = sweep_settings(paper, store)
        _CACHE[key] = {"config": cfg, **cfg.protocol(device=device, progress=not quick, **opts)}
    return _CACHE[key]


def _write_csv(df: pd.DataFrame, outdir, name: str, paths: list) -> None:
    if outdir is not None:
        paths.append(save_table(df, outdir, name))


# ------------------------------------------------------------------------------------------------
# Scan & Snap
# ------------------------------------------------------------------------------------------------
def fig_scan_snap_maps(outdir, quick: bool = True, *, device: str = "auto", corpus=None) -> pd.DataFrame:
    """Fig. 7: lowest-layer attention maps (batch element 0 of training chunk 101) per model and
    logged step; the table has each map's entropy and its Frobenius change since the previous one."""
    res = results("scan-snap", quick, device, corpus, store=_runs_dir(outdir))
    maps = res["maps"]
    layers = sorted(maps)
    steps = sorted(next(iter(maps.values())))
    fig, axes = plt.subplots(len(layers), len(steps), figsize=(2.4 * len(steps), 2.4 * len(layers)), squeeze=False)
    rows = []
    for r, L in enumerate(layers):
        prev = None
        for c, s in enumerate(steps):
            A = maps[L][s]
            ent = float(-(A * np.log(A + 1e-8)).sum(1).mean())
            rows.append({"n_layer": L, "step": s, "snapshot_entropy": ent,
                         "change": np.nan if prev is None else float(np.linalg.norm(A - prev))})
            prev = A
            axes[r, c].imshow(A, cmap="viridis", vmin=0, vmax=1)
            axes[r, c].set_title(f"{L} layer{'s' * (L > 1)}, it {s}\nH={ent:.2f}", fontsize=8)
            axes[r, c].set_xticks([]), axes[r, c].set_yticks([])
    fig.suptitle(f"Scan & Snap Fig. 7 on WikiText-2: SGD lr {res['config'].lr:g} (FFN {res['config'].ffn_lr:g})", fontsize=9)
    fig.tight_layout()
    finish_figure(fig, outdir, "wikitext_fig7_attention_maps.png")
    return pd.DataFrame(rows)


def fig_scan_snap_entropy_vs_lr(outdir, quick: bool = True, *, device: str = "auto", corpus=None) -> pd.DataFrame:
    """Fig. 10: validation attention entropy of 1-layer models vs SGD learning rate, mean +- 1 std over seeds."""
    res = results("scan-snap", quick, device, corpus, store=_runs_dir(outdir))
    df = res["sweep"]
    g = df.groupby("lr")["entropy"].agg(["mean", "std"]).reset_index()
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    ax.errorbar(g["lr"], g["mean"], yerr=g["std"].fillna(0), marker="o", capsize=3)
    ax.set_xlabel("learning rate $\\eta$ (SGD, all parameters)")
    ax.set_ylabel("attention entropy (validation)")
    ax.set_title(f"Scan & Snap Fig. 10, WikiText-2, {len(res['config'].seeds)} seeds", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    finish_figure(fig, outdir, "wikitext_fig10_entropy_vs_lr.png")
    return df


# ------------------------------------------------------------------------------------------------
# Topic
# ------------------------------------------------------------------------------------------------
def fig_topic_ratios(outdir, quick: bool = True, *, device: str = "auto", corpus=None) -> pd.DataFrame:
    """Same-topic / different-topic ratios (embedding cosine, dot product, attention) per
    threshold, trained masked LM vs its random initialisation."""
    res = results("topic", quick, device, corpus, store=_runs_dir(outdir))
    df = res["table"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for ax, stat in zip(axes, ("cosine", "dot", "attention")):
        for model, m in (("trained", "o-"), ("control", "s--")):
            d = df[df["model"] == model]
            ax.plot(d["threshold"], d[f"{stat}_ratio"], m, label=model)
        ax.axhline(1, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("top fraction of words per topic")
        ax.set_title(f"{stat}: same / different topic", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Topic ratios on WikiText-2 (LDA {res['config'].num_topics} topics, masked LM)", fontsize=9)
    fig.tight_layout()
    finish_figure(fig, outdir, "wikitext_topic_ratios.png")
    return df


# ------------------------------------------------------------------------------------------------
# Figures and claims
# ------------------------------------------------------------------------------------------------
def make_realtext_figures(paper: str, outdir, *, quick: bool = True, device: str = "auto", corpus=None) -> list[Path]:
    """Write ``paper``'s real-text figures and CSVs into ``outdir``; returns the paths."""
    paper = "scan-snap" if paper == "scan_snap" else paper
    check_choice("paper", paper, ("scan-snap", "topic"))
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    kw = dict(device=device, corpus=corpus)
    if paper == "scan-snap":
        _write_csv(fig_scan_snap_maps(out, quick, **kw), out, "wikitext_fig7_attention_maps.csv", paths)
        _write_csv(fig_scan_snap_entropy_vs_lr(out, quick, **kw), out, "wikitext_fig10_entropy_vs_lr.csv", paths)
        names = ["wikitext_fig7_attention_maps.png", "wikitext_fig10_entropy_vs_lr.png"]
    else:
        _write_csv(fig_topic_ratios(out, quick, **kw), out, "wikitext_topic_ratios.csv", paths)
        names = ["wikitext_topic_ratios.png"]
    return [out / n for n in names] + paths


def text_regime(res, extra: str = "") -> str:
    """The real-text regime line of a protocol's results (corpus, vocabulary, sizes, time)."""
    c = res["config"]
    return (f"WikiText-2 (train wiki.test.tokens, validate wiki.valid.tokens), vocab {c.vocab_size}, emsize {c.emsize}, "
            f"{c.steps} minibatches{extra}; {res['seconds']:.0f} s of training")


def claims_for(paper: str, quick: bool = True, device: str = "auto", corpus=None) -> list[Claim]:
    """The real-text claims of ``paper`` decided on :func:`results` (numbers in ``evidence``)."""
    paper = "scan-snap" if paper == "scan_snap" else paper
    check_choice("paper", paper, ("scan-snap", "topic"))
    res = results(paper, quick, device, corpus)
    return {"scan-snap": _scan_snap_claims, "topic": _topic_claims}[paper](res)


def _scan_snap_claims(res) -> list[Claim]:
    c, df = res["config"], res["sweep"]
    g = df.groupby("lr")["entropy"].agg(["mean", "std"])
    rho = float(spearmanr(df["lr"], df["entropy"]).statistic)
    lr_claim = Claim("wikitext_higher_lr_lower_entropy", "Higher SGD learning rate => lower attention entropy (Fig. 10)",
                     bool(rho < 0 and g["mean"].iloc[-1] < g["mean"].iloc[0]),
                     {"lr": list(g.index), "entropy_mean": list(g["mean"]), "entropy_std": list(g["std"]),
                      "spearman_lr_entropy": rho},
                     text_regime(res, f"; 1 layer, SGD one lr for all, {c.sweep_steps} minibatches, seeds {list(c.seeds)}"))
    ev, ok = {}, True
    for L, snaps in res["maps"].items():
        steps = sorted(snaps)
        ents = [float(-(snaps[s] * np.log(snaps[s] + 1e-8)).sum(1).mean()) for s in steps]
        changes = [float(np.linalg.norm(snaps[b] - snaps[a])) for a, b in zip(steps, steps[1:])]
        ev[f"L{L}_steps"], ev[f"L{L}_entropy"], ev[f"L{L}_change"] = steps, ents, changes
        ok &= ents[-1] < ents[0] and changes[-1] < changes[0]
    freeze = Claim("wikitext_attention_sparsifies_and_freezes",
                   "At constant lr the lowest layer's attention becomes sparse (entropy falls) and freezes "
                   "(later changes smaller than early ones) (Fig. 7)", bool(ok), ev,
                   text_regime(res, f"; layers {list(c.layers)}, SGD lr {c.lr:g}, FFN lr {c.ffn_lr:g}"))
    return [lr_claim, freeze]


def _topic_claims(res) -> list[Claim]:
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


def corpus_available(corpus=None) -> bool:
    """Whether the corpus (default: ``../shared/data/wikitext-2``, or the CLI's ``--corpus``) is
    usable. An explicit ``--corpus`` that is missing is refused up front by the CLI (exit 2); a
    missing *default* corpus only skips the real-text figures and claims (with a note)."""
    try:
        text.check_corpus(corpus)
    except ConfigError:
        return False
    return True


def paper_realtext_figures(paper: str, outdir, *, quick: bool = True, device: str = "auto") -> list[Path]:
    """:func:`make_realtext_figures` for a paper's ``make_figures``; ``[]`` (and a note on stderr)
    when no corpus is present."""
    if not corpus_available():
        print(f"note: {paper}: no WikiText corpus at {text.resolve_corpus(None)}; real-text figures skipped",
              file=sys.stderr)
        return []
    return make_realtext_figures(paper, outdir, quick=quick, device=device)


def paper_realtext_claims(paper: str, quick: bool = True, device: str = "auto") -> list[Claim]:
    """:func:`claims_for` for a paper's ``compare``; ``[]`` when no corpus is present."""
    return claims_for(paper, quick, device) if corpus_available() else []
