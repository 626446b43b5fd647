"""JoMA on WikiText-2 (papers/joma.md §5 Figs. 6 and 8): figures, tables and claims.

The runs are :class:`empirical.joma.text.JomaTextConfig`'s protocol, made once per process and
setting by the shared :func:`figures.realtext.results` (its store: ``<outdir>/wikitext_runs``,
or the CLI's ``--store``).

* :func:`fig_joma_entropy` (Fig. 6), :func:`fig_joma_lr_sweep` (Fig. 8) — per-layer attention
  entropy and fc1 stable rank over training; each writes its PNG and its long CSV;
* :func:`fig_wikitext` — both, plus the per-layer summary table; the entry of the paper's
  ``FIGURES`` (skipped, with a note, when no corpus is present);
* :func:`claims` / :func:`wikitext_claims` — drop and bounce of entropy and stable rank, and the
  bounce at the best learning rate, decided on those runs (``[]`` without a corpus).
"""

from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from empirical import text  # noqa: E402
from empirical.joma.text import per_layer_summary  # noqa: E402

from ..core import finish_figure, save_table  # noqa: E402
from ..style import MAX_PER_ROW, axis_label, legend_outside  # noqa: E402
from ..realtext import corpus_available, results, runs_dir, text_regime  # noqa: E402
from ..report import Claim  # noqa: E402

__all__ = ["fig_joma_entropy", "fig_joma_lr_sweep", "fig_wikitext", "summaries", "drop_bounce", "claims",
           "wikitext_claims", "DROP_BOUNCE_NATS", "STABLE_RANK_REL"]

#: a layer "drops then bounces" when its entropy falls at least this far below the start and
#: rises at least this far above its minimum by the end (1 % of the uniform causal 2.632 nats)
DROP_BOUNCE_NATS = 0.026
#: the same for fc1's stable rank, relative to its initial value
STABLE_RANK_REL = 0.01


def _long(traj, **keys) -> pd.DataFrame:
    """Per logged step and layer: entropy and fc1 stable rank (and the run's validation loss)."""
    n = sum(1 for v in traj.data_vars if v.startswith("entropy_layer"))
    return pd.DataFrame([{**keys, "step": int(s), "layer": l, "entropy": float(traj[f"entropy_layer{l}"][i]),
                          "stable_rank": float(traj[f"stable_rank_layer{l}"][i]),
                          "val_loss": float(traj["val_loss"][i])}
                         for i, s in enumerate(traj["step"].values) for l in range(n)])


def _layer_panels(trajs: dict, title, outdir, name):
    """Per run: its attention entropy above its fc1 stable rank, at most three runs per row
    (colour: layer, one legend below naming every layer)."""
    n = len(trajs)
    ncols = min(n, MAX_PER_ROW)
    nblocks = -(-n // ncols)
    fig, axes = plt.subplots(2 * nblocks, ncols, figsize=(3.6 * ncols, 2.8 * 2 * nblocks), squeeze=False,
                             layout="constrained")
    for c in range(n, nblocks * ncols):
        fig.delaxes(axes[2 * (c // ncols), c % ncols])
        fig.delaxes(axes[2 * (c // ncols) + 1, c % ncols])
    for c, (key, traj) in enumerate(trajs.items()):
        top, bottom = axes[2 * (c // ncols), c % ncols], axes[2 * (c // ncols) + 1, c % ncols]
        nl = sum(1 for v in traj.data_vars if v.startswith("entropy_layer"))
        colors = plt.cm.rainbow(np.linspace(0, 1, max(nl, 2)))
        for l in range(nl):
            top.plot(traj["step"], traj[f"entropy_layer{l}"], color=colors[l], label=f"layer {l}")
            bottom.plot(traj["step"], traj[f"stable_rank_layer{l}"], color=colors[l], label=f"layer {l}")
        top.set_title(f"{title(key)}; validation loss {float(traj['val_loss'].min()):.3f}")
        top.set_ylabel(axis_label("attention entropy", "nats", "$H$"))
        bottom.set_ylabel(axis_label("stable rank of fc1", symbol=r"$\|W\|_F^2 / \|W\|_2^2$"))
        for ax in (top, bottom):
            ax.set_xlabel(axis_label("minibatch", symbol="$k$"))
    legend_outside(fig, ncols=6)
    finish_figure(fig, outdir, name)


def fig_joma_entropy(outdir, quick: bool = True, *, device: str = "auto", corpus=None) -> pd.DataFrame:
    """Fig. 6: per-layer validation attention entropy (top) and fc1 stable rank (bottom) over
    training, one panel per depth. Returns (and writes) the long table (n_layer, step, layer,
    entropy, ...)."""
    res = results("joma", quick, device, corpus, store=runs_dir(outdir))
    _layer_panels(res["depth"], lambda L: f"{L} layer" + "s" * (L != 1), outdir, "wikitext_fig6_entropy.png")
    df = pd.concat([_long(t, n_layer=L) for L, t in res["depth"].items()], ignore_index=True)
    save_table(df, outdir, "wikitext_fig6_entropy.csv")
    return df


def fig_joma_lr_sweep(outdir, quick: bool = True, *, device: str = "auto", corpus=None) -> pd.DataFrame:
    """Fig. 8: the same for the ``sweep_layers``-layer model at each Adam learning rate."""
    res = results("joma", quick, device, corpus, store=runs_dir(outdir))
    _layer_panels(res["sweep"], lambda lr: f"Adam lr {lr:g}", outdir, "wikitext_fig8_lr_sweep.png")
    df = pd.concat([_long(t, lr=lr) for lr, t in res["sweep"].items()], ignore_index=True)
    save_table(df, outdir, "wikitext_fig8_lr_sweep.csv")
    return df


def summaries(res) -> pd.DataFrame:
    """Per run and layer: :func:`~empirical.joma.text.per_layer_summary` of entropy and stable rank."""
    rows = []
    for kind, runs in (("depth", res["depth"]), ("lr_sweep", res["sweep"])):
        for key, traj in runs.items():
            for prefix, q in (("entropy_layer", "entropy"), ("stable_rank_layer", "stable_rank")):
                s = per_layer_summary(traj, prefix)
                s.insert(0, "quantity", q)
                s.insert(0, "lr" if kind == "lr_sweep" else "n_layer", key)
                s.insert(0, "run", kind)
                s["final_val_loss"] = float(traj["val_loss"].values[-1])
                rows.append(s)
    return pd.concat(rows, ignore_index=True)


def fig_wikitext(outdir, quick: bool = True, *, device: str = "auto", corpus=None) -> dict | None:
    """Figs. 6 and 8 and the summary table (``wikitext_fig6_fig8_summary.csv``); ``None`` (and a
    note on stderr) when no corpus is present."""
    if not corpus_available(corpus):
        print(f"note: joma: no WikiText corpus at {text.resolve_corpus(corpus)}; real-text figures skipped",
              file=sys.stderr)
        return None
    out = {"fig6": fig_joma_entropy(outdir, quick, device=device, corpus=corpus),
           "fig8": fig_joma_lr_sweep(outdir, quick, device=device, corpus=corpus),
           "summary": summaries(results("joma", quick, device, corpus, store=runs_dir(outdir)))}
    save_table(out["summary"], outdir, "wikitext_fig6_fig8_summary.csv")
    return out


def drop_bounce(summary: pd.DataFrame, delta) -> np.ndarray:
    """Per layer of a :func:`~empirical.joma.text.per_layer_summary`: dropped and bounced by more
    than ``delta`` (a number, or one per layer)."""
    d = np.asarray(delta, float)
    return ((summary["drop"] > d) & (summary["bounce"] > d)).to_numpy()


def claims(res) -> list[Claim]:
    """The real-text claims decided on the protocol's results ``res`` (numbers in ``evidence``)."""
    c = res["config"]
    ev_e, ev_s, hits_e, hits_s = {}, {}, [], []
    for L, traj in res["depth"].items():
        se, ss = per_layer_summary(traj), per_layer_summary(traj, "stable_rank_layer")
        he, hs = drop_bounce(se, DROP_BOUNCE_NATS), drop_bounce(ss, STABLE_RANK_REL * ss["initial"])
        hits_e += list(he)
        hits_s += list(hs)
        ev_e.update({f"L{L}_initial": list(se["initial"]), f"L{L}_min": list(se["min"]),
                     f"L{L}_min_step": list(se["min_step"]), f"L{L}_final": list(se["final"])})
        ev_s.update({f"L{L}_initial": list(ss["initial"]), f"L{L}_min": list(ss["min"]),
                     f"L{L}_min_step": list(ss["min_step"]), f"L{L}_final": list(ss["final"])})
    ev_e["layers_drop_and_bounce"] = f"{int(sum(hits_e))}/{len(hits_e)}"
    ev_s["layers_drop_and_bounce"] = f"{int(sum(hits_s))}/{len(hits_s)}"
    setting = text_regime(res, f"; Adam lr {c.lr:g}, depths {list(c.layers)}, seeds {list(c.seeds)}, "
                          f"drop/bounce threshold {DROP_BOUNCE_NATS} nats (stable rank {STABLE_RANK_REL:.0%})")
    sweep = {lr: per_layer_summary(t) for lr, t in res["sweep"].items()}
    val = {lr: float(t["val_loss"].values[-1]) for lr, t in res["sweep"].items()}
    best = min(val, key=val.get)
    bounce = {lr: float(np.mean(drop_bounce(s, DROP_BOUNCE_NATS))) for lr, s in sweep.items()}
    return [
        Claim("wikitext_entropy_drop_and_bounce", "Per-layer attention entropy drops early, then bounces (Fig. 6)",
              bool(np.mean(hits_e) >= 0.5), ev_e, setting),
        Claim("wikitext_stable_rank_drop_and_bounce", "The stable rank of each MLP's first layer drops, then bounces",
              bool(np.mean(hits_s) >= 0.5), ev_s, setting),
        Claim("wikitext_bounce_at_best_lr",
              f"In the {c.sweep_layers}-layer lr sweep the run with the lowest validation loss shows the entropy "
              "bounce (Fig. 8: bounce correlates with low validation loss)",
              bool(bounce[best] >= 0.5), {"lr": list(val), "final_val_loss": list(val.values()),
                                          "fraction_layers_bouncing": list(bounce.values())},
              text_regime(res, f"; {c.sweep_layers} layers, Adam lr {list(c.sweep_lrs)}")),
    ]


def wikitext_claims(quick: bool = True, device: str = "auto", corpus=None) -> list[Claim]:
    """:func:`claims` on the protocol's runs for ``tdyn compare joma``; ``[]`` when no corpus is present."""
    return claims(results("joma", quick, device, corpus)) if corpus_available(corpus) else []
