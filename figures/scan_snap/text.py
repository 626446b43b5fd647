"""Scan & Snap on real text (papers/scan_snap.md §5.6): the WikiText-2 figures (Figs. 7 and 10)
and the claims decided on the same runs.

The protocol is :class:`empirical.scan_snap.text.ScanSnapTextConfig` (the paper row's ``text``
slot); its runs happen once per process and setting (:func:`figures.realtext.results`, shared
with the other papers). Without a corpus the figures are skipped with a note and there are no
real-text claims.
"""

from __future__ import annotations

import sys

import matplotlib.pyplot as plt  # the Agg backend: figures/__init__ imports figures.core first
import numpy as np
import pandas as pd

from empirical import text as corpus_text
from theory.scan_snap import PAPER

from ..core import finish_figure, save_table
from ..realtext import corpus_available, results, runs_dir, text_regime

__all__ = ["fig_scan_snap_maps", "fig_scan_snap_entropy_vs_lr", "claims", "decide", "TEXT_CLAIMS"]


def _corpus_or_note(corpus) -> bool:
    """Whether the corpus is there; if not, a note on stderr (the real-text figures are skipped)."""
    if corpus_available(corpus):
        return True
    print(f"note: {PAPER}: no WikiText corpus at {corpus_text.resolve_corpus(corpus)}; real-text figure skipped",
          file=sys.stderr)
    return False


def fig_scan_snap_maps(outdir, quick: bool = True, *, device: str = "auto",
                       corpus=None) -> pd.DataFrame | None:
    """Fig. 7: lowest-layer attention maps (batch element 0 of training chunk 101) per model and
    logged step; the table (``wikitext_fig7_attention_maps.csv``) has each map's entropy and its
    Frobenius change since the previous one. None (and a note) without a corpus."""
    if not _corpus_or_note(corpus):
        return None
    res = results(PAPER, quick, device, corpus, store=runs_dir(outdir))
    maps = res["maps"]
    layers = sorted(maps)
    steps = sorted(next(iter(maps.values())))
    from matplotlib.colors import Normalize

    # rows: logged steps; columns: models (at most three per row); one shared colour scale
    fig, axes = plt.subplots(len(steps), len(layers), figsize=(2.8 * len(layers) + 0.8, 2.4 * len(steps)),
                             squeeze=False, layout="constrained")
    norm = Normalize(0.0, 1.0)
    rows = []
    for r, L in enumerate(layers):
        prev = None
        for c, s in enumerate(steps):
            A = maps[L][s]
            ent = float(-(A * np.log(A + 1e-8)).sum(1).mean())
            rows.append({"n_layer": L, "step": s, "snapshot_entropy": ent,
                         "change": np.nan if prev is None else float(np.linalg.norm(A - prev))})
            prev = A
            ax = axes[c, r]
            image = ax.imshow(A, cmap="viridis", norm=norm)
            ax.set_title(f"{L} layer{'s' * (L > 1)}, iteration {s}, $H = {ent:.2f}$")
            ax.set_xlabel("key position")
            ax.set_ylabel("query position")
            ax.grid(False)
    fig.colorbar(image, ax=axes.ravel().tolist(), label="attention weight")
    fig.suptitle(f"Scan & Snap Fig. 7 on WikiText-2: SGD $\\eta = {res['config'].lr:g}$ "
                 f"(FFN $\\eta = {res['config'].ffn_lr:g}$)")
    finish_figure(fig, outdir, "wikitext_fig7_attention_maps.png")
    table = pd.DataFrame(rows)
    save_table(table, outdir, "wikitext_fig7_attention_maps.csv")
    return table


def fig_scan_snap_entropy_vs_lr(outdir, quick: bool = True, *, device: str = "auto",
                                corpus=None) -> pd.DataFrame | None:
    """Fig. 10: validation attention entropy of 1-layer models vs SGD learning rate, mean +- 1 std
    over seeds (table: ``wikitext_fig10_entropy_vs_lr.csv``). None (and a note) without a corpus."""
    if not _corpus_or_note(corpus):
        return None
    res = results(PAPER, quick, device, corpus, store=runs_dir(outdir))
    df = res["sweep"]
    g = df.groupby("lr")["entropy"].agg(["mean", "std"]).reset_index()
    fig, ax = plt.subplots(figsize=(4.2, 3.2), layout="constrained")
    ax.plot(g["lr"], g["mean"], "o-", label="mean over seeds")
    ax.errorbar(g["lr"], g["mean"], yerr=g["std"].fillna(0), fmt="none", label="$\\pm$ 1 sd")
    ax.set_xlabel("learning rate $\\eta$ (SGD, all parameters)")
    ax.set_ylabel("attention entropy (validation)")
    ax.set_title(f"Scan & Snap Fig. 10, WikiText-2, {len(res['config'].seeds)} seeds")
    ax.legend()
    finish_figure(fig, outdir, "wikitext_fig10_entropy_vs_lr.png")
    save_table(df, outdir, "wikitext_fig10_entropy_vs_lr.csv")
    return df


#: the real-text statements (Decision 13: outside the theory; qualitative), each with the sign that
#: decides it. Decided over seeds only (>= figures.claims.MIN_SEEDS), never from one run.
TEXT_CLAIMS = {
    "wikitext_higher_lr_lower_entropy": (
        "Higher SGD learning rate => lower attention entropy (Fig. 10; App. G)",
        "per seed, the least-squares slope of the validation attention entropy on the learning rate"),
    "wikitext_attention_sparsifies_and_freezes": (
        "At constant lr the lowest layer's attention becomes sparse (entropy falls) and freezes "
        "(later changes smaller than early ones) (Fig. 7)",
        "per run, the last map change over the first (and the entropy fall)"),
}

def _criterion():
    from ..claims_registry import Criterion

    return Criterion("below", 0.0, "Fig. 10's statement is a sign: entropy decreasing in the learning rate, "
                                    "i.e. a negative slope of the validation attention entropy on lr")


def decide(res) -> list[dict]:
    """The real-text claims on the protocol's results ``res``, each a dict (name, statement,
    statistic, per-seed ``values``, ``verdict``, ``interval``, ``seeds``, ``note``). Fig. 10 is
    decided over the sweep's seeds (:func:`figures.claims.decide`, a bootstrap interval) when
    there are >= 5 of them (the full protocol), else left undecided; Fig. 7 runs one seed per
    model, so it is reported (its numbers) and never decided."""
    from ..claims import MIN_SEEDS
    from ..claims import decide as decide_over_seeds

    c, df = res["config"], res["sweep"]
    slopes = [float(np.polyfit(g["lr"].values, g["entropy"].values, 1)[0]) for _, g in df.groupby("seed")
              if g["lr"].nunique() > 1]
    name = "wikitext_higher_lr_lower_entropy"
    lr_claim = {"name": name, "statement": TEXT_CLAIMS[name][0], "statistic": TEXT_CLAIMS[name][1],
                "values": slopes, "seeds": len(slopes), "verdict": None, "interval": None,
                "regime": text_regime(res, f"; 1 layer, SGD one lr for all, {c.sweep_steps} minibatches, lrs "
                                           f"{list(c.sweep_lrs)}, seeds {list(c.seeds)}")}
    if len(slopes) >= MIN_SEEDS:
        d = decide_over_seeds(slopes, _criterion())
        lr_claim.update({"verdict": d.verdict, "estimate": d.estimate, "interval": list(d.interval),
                         "method": d.method, "note": ""})
    else:
        lr_claim["note"] = (f"undecided: {len(slopes)} seeds < {MIN_SEEDS} in this protocol (the full one "
                            f"has 5); no verdict from fewer seeds")
    ev = {}
    for L, snaps in res["maps"].items():
        steps = sorted(snaps)
        ev[f"L{L}_entropy"] = [float(-(snaps[s] * np.log(snaps[s] + 1e-8)).sum(1).mean()) for s in steps]
        ev[f"L{L}_change"] = [float(np.linalg.norm(snaps[b] - snaps[a])) for a, b in zip(steps, steps[1:])]
    name = "wikitext_attention_sparsifies_and_freezes"
    freeze = {"name": name, "statement": TEXT_CLAIMS[name][0], "statistic": TEXT_CLAIMS[name][1],
              "values": ev, "seeds": 1, "verdict": None, "interval": None,
              "note": "undecided: the Fig. 7 protocol trains one seed per model; numbers reported, no verdict",
              "regime": text_regime(res, f"; layers {list(c.layers)}, SGD lr {c.lr:g}, FFN lr {c.ffn_lr:g}")}
    return [lr_claim, freeze]


def claims(quick: bool = True, device: str = "auto", corpus=None) -> list[dict]:
    """The real-text claims (:func:`decide` on :func:`figures.realtext.results`); ``[]`` when no
    corpus is present. They go to the compare report's details (``real_text_claims``), not its
    claims table: their protocol is not a map over the paper's regime (Decision 13)."""
    return decide(results(PAPER, quick, device, corpus)) if corpus_available(corpus) else []
