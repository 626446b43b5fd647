"""JoMA on WikiText-2 (docs/papers/joma.md §5 Figs. 6 and 8): figures, tables and claims.

The runs are :class:`empirical.joma.text.JomaTextConfig`'s protocol, made once per process and
setting by the shared :func:`figures.realtext.results` (its store: ``<outdir>/wikitext_runs``,
or the CLI's ``--store``).

* :func:`fig_joma_entropy` (Fig. 6), :func:`fig_joma_lr_sweep` (Fig. 8) — per-layer attention
  entropy and fc1 stable rank over training; each writes its PNG and its long CSV;
* :func:`fig_wikitext` — both, plus the per-layer summary table; the entry of the paper's
  ``FIGURES`` (skipped, with a note, when no corpus is present);
* :func:`text_claim_results` — the real-text claims (``text_claims.toml``: drop and bounce of
  entropy and stable rank, the bounce at the best learning rate) on those runs, per seed, with the
  criterion of docs/claims.md (:func:`curve_rebound` > 0); *untested* while the runs are shorter
  than the paper's (no in-regime point), with the measured values and what running the paper's
  protocol costs (:data:`PROTOCOL_COST`, measured by :mod:`empirical.joma.text_cost`); ``[]``
  without a corpus.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from empirical.joma.text import per_layer_summary  # noqa: E402

from ..core import finish_figure, save_table  # noqa: E402
from ..style import MAX_PER_ROW, axis_label, legend_outside  # noqa: E402
from ..context import RunContext  # noqa: E402
from ..realtext import corpus_available, results, runs_dir  # noqa: E402

__all__ = ["fig_joma_entropy", "fig_joma_lr_sweep", "fig_wikitext", "summaries", "curve_rebound",
           "text_claim_results", "text_registry", "TEXT_CLAIMS", "PROTOCOL_COST", "untested_reason",
           "shuffled_null_runs"]

#: the real-text claims (registry format, docs/claims.md), decided on the protocol's own runs
TEXT_CLAIMS = Path(__file__).with_name("text_claims.toml")


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
    layers = {key: sum(1 for v in traj.data_vars if v.startswith("entropy_layer")) for key, traj in trajs.items()}
    # one colour per layer across every run (perceptual: layer order reads as lightness), so that the
    # legend's "layer l" is the same curve style in every panel
    colors = plt.cm.viridis(np.linspace(0, 0.9, max(2, *layers.values())))
    for c, (key, traj) in enumerate(trajs.items()):
        top, bottom = axes[2 * (c // ncols), c % ncols], axes[2 * (c // ncols) + 1, c % ncols]
        for l in range(layers[key]):
            top.plot(traj["step"], traj[f"entropy_layer{l}"], color=colors[l], label=f"layer {l}")
            bottom.plot(traj["step"], traj[f"stable_rank_layer{l}"], color=colors[l], label=f"layer {l}")
        top.set_title(f"{title(key)}; validation loss {float(traj['val_loss'].min()):.3f}")
        top.set_ylabel(axis_label("attention entropy", "nats", "$H$"))
        bottom.set_ylabel(axis_label("stable rank of fc1", symbol=r"$\|W\|_F^2 / \|W\|_2^2$"))
        for ax in (top, bottom):
            ax.set_xlabel(axis_label("minibatch", symbol="$k$"))
    legend_outside(fig, ncols=6)
    finish_figure(fig, outdir, name)


def fig_joma_entropy(outdir, quick: bool = True, *, device: str = "auto",
                     ctx: RunContext | None = None) -> pd.DataFrame:
    """Fig. 6: per-layer validation attention entropy (top) and fc1 stable rank (bottom) over
    training, one panel per depth. Returns (and writes) the long table (n_layer, step, layer,
    entropy, ...)."""
    res = results("joma", RunContext.of(ctx, quick=quick, device=device), store=runs_dir(outdir))
    _layer_panels(res["depth"], lambda L: f"{L} layer" + "s" * (L != 1), outdir, "wikitext_fig6_entropy.png")
    df = pd.concat([_long(t, n_layer=L) for L, t in res["depth"].items()], ignore_index=True)
    save_table(df, outdir, "wikitext_fig6_entropy.csv")
    return df


def fig_joma_lr_sweep(outdir, quick: bool = True, *, device: str = "auto",
                      ctx: RunContext | None = None) -> pd.DataFrame:
    """Fig. 8: the same for the ``sweep_layers``-layer model at each Adam learning rate."""
    res = results("joma", RunContext.of(ctx, quick=quick, device=device), store=runs_dir(outdir))
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


def fig_wikitext(outdir, quick: bool = True, *, device: str = "auto", ctx: RunContext | None = None) -> dict | None:
    """Figs. 6 and 8 and the summary table (``wikitext_fig6_fig8_summary.csv``) on ``ctx.corpus``;
    ``None`` (and a note on stderr) when no corpus is present."""
    ctx = RunContext.of(ctx, quick=quick, device=device)
    if not corpus_available(ctx.corpus):
        print(f"note: joma: no WikiText corpus at {ctx.corpus_dir()}; real-text figures skipped", file=sys.stderr)
        return None
    out = {"fig6": fig_joma_entropy(outdir, quick, device=device, ctx=ctx),
           "fig8": fig_joma_lr_sweep(outdir, quick, device=device, ctx=ctx),
           "summary": summaries(results("joma", ctx, store=runs_dir(outdir)))}
    save_table(out["summary"], outdir, "wikitext_fig6_fig8_summary.csv")
    return out


def curve_rebound(traj, config=None, *, name: str, relative: bool = False) -> float:
    """``y(T) - min_{t <= T/2} y(t)`` of the curve ``traj[name]`` over the logged minibatches
    (``T`` the last one; divided by ``y(0)`` with ``relative``): positive once the curve has turned
    and risen back, negative while it is still falling (the criterion of ``text_claims.toml``)."""
    step = np.asarray(traj["step"].values, dtype=np.float64)
    y = np.asarray(traj[name].values, dtype=np.float64)
    first = step <= step[-1] / 2
    out = float(y[-1] - y[first].min())
    return out / float(y[0]) if relative else out


def text_registry():
    """The real-text claims' registry (``text_claims.toml``), validated (its runs are the
    protocol's, so there is no Config to check its map against)."""
    from ..claims.registry import load_registry

    return load_registry(TEXT_CLAIMS, paper="joma", resolve=True)


def _layers(traj) -> int:
    return sum(1 for v in traj.data_vars if v.startswith("entropy_layer"))


#: the paper's protocol's cost (every depth, learning rate and seed of ``JomaTextConfig.full()``: 10
#: (depth, lr) runs x 12 seeds x 6900 minibatches at the full vocabulary, every validation chunk at each
#: of the 70 checkpoints), in seconds. CPU: :mod:`empirical.joma.text_cost` on one core of this
#: project's 2-core machine (process CPU time of tdyn's own runs, one torch thread: 0.109 s per
#: minibatch at 1 layer, 0.386 s at 5, other depths interpolated; a validation pass priced as 620
#: forward-only chunks of half a minibatch's tokens, 1/6 of a minibatch each). GPU: the
#: same-size model (tutorial Transformer, d 200, one head, 40k-word decoder, Adam, clip 0.5) timed in
#: plain PyTorch on one NVIDIA H100 80GB, 300 minibatches and a 620-chunk validation pass per depth,
#: one run at a time (launch-bound: runs packed side by side on the GPU would cost less).
PROTOCOL_COST = {"cpu_core_seconds": 572471.0, "gpu_seconds": 21414.0, "gpu": "NVIDIA H100 80GB"}


def _points(claim, cells, inside):
    """Map points of ``cells`` (:func:`figures.claims.points_over_seeds`)."""
    from ..claims import points_over_seeds

    return points_over_seeds(claim, cells, inside, None)


def text_claim_results(ctx: RunContext) -> list:
    """The real-text claims as :class:`~figures.claims.ClaimResult` s, on the protocol's runs
    (shared with the figures: :func:`figures.realtext.results`), per seed: each map point is a
    (depth, layer) or a learning rate, inside the regime only where the runs are as long as the
    paper's (20 epochs); with no such point (the quick protocol) the claim is *untested*, with the
    measured values, why and what running it costs (untested, with how to get the corpus, without one)."""
    quick = ctx.quick
    if not corpus_available(ctx.corpus):
        from ..realtext import no_corpus_claims

        return no_corpus_claims(text_registry(), quick=quick)
    from ..claims import conclude

    res = results("joma", ctx)
    c, reg = res["config"], text_registry()
    steps_bound = reg.get("wikitext_entropy_drop_and_bounce").regime[0]
    long_enough = steps_bound.contains(c.steps)
    why = () if long_enough else (f"minibatches = {c.steps}, regime {steps_bound.describe()}",)

    def per_seed(L, lr, fn):
        return [fn(t) for t in res["runs"][(L, lr)]]

    depth_cells = {"entropy": [], "stable_rank": []}
    for L in c.layers:
        for layer in range(_layers(res["depth"][L])):
            coords = {"n_layer": L, "layer": layer}
            depth_cells["entropy"].append((coords, per_seed(L, c.lr, lambda t: curve_rebound(t, name=f"entropy_layer{layer}"))))
            depth_cells["stable_rank"].append((coords, per_seed(
                L, c.lr, lambda t: curve_rebound(t, name=f"stable_rank_layer{layer}", relative=True))))
    val = {lr: float(t["val_loss"].values[-1]) for lr, t in res["sweep"].items()}
    best = min(val, key=val.get)
    sweep_cells = [({"lr": lr}, per_seed(c.sweep_layers, lr, lambda t: np.mean(
        [curve_rebound(t, name=f"entropy_layer{l}") for l in range(_layers(t))]))) for lr in c.sweep_lrs]
    out = []
    for name, cells, inside in (
            ("wikitext_entropy_drop_and_bounce", depth_cells["entropy"], lambda co: (long_enough, why)),
            ("wikitext_stable_rank_drop_and_bounce", depth_cells["stable_rank"], lambda co: (long_enough, why)),
            ("wikitext_bounce_at_best_lr", sweep_cells,
             lambda co: (long_enough and co["lr"] == best, why + (() if co["lr"] == best else (
                 f"lowest validation loss = False (lr {best:g} has it)",))))):
        claim = reg.get(name)
        points = _points(claim, cells, inside)
        untested = "" if long_enough else untested_reason(res, [v for _, vals in cells for v in vals])
        out.append(conclude(claim, points, quick=quick, untested=untested))
    return out


def shuffled_null_runs(config, *, seeds, device: str = "auto"):
    """The real-text claims' null control: the same Transformer trained on the training split with its
    tokens permuted (no structure to learn). Not available yet: the shared run config
    (:class:`empirical.textrun.TextRunConfig`) has no token-shuffling option, and the claims are
    untested anyway (no run reaches the paper's horizon), so the null is reported as not run."""
    raise NotImplementedError("the shuffled-text null needs a token-shuffling option in empirical.textrun "
                              "(not run: the real-text claims are untested)")


def untested_reason(res, values, cost: dict | None = None) -> str:
    """Why a real-text claim has no in-regime point, what the quick runs measured and what running
    the paper's protocol costs: :data:`PROTOCOL_COST` (measured at full vocabulary) and this run's
    own training rate (at its small vocabulary, a lower bound)."""
    from empirical.joma.text import JomaTextConfig

    c = res["config"]
    cost = PROTOCOL_COST if cost is None else cost
    full = JomaTextConfig.full()
    pairs = list(dict.fromkeys([(L, full.lr) for L in full.layers] + [(full.sweep_layers, lr) for lr in full.sweep_lrs]))
    runs_here = len(res["runs"]) * len(c.seeds)
    rate = res["seconds"] / max(runs_here * c.steps, 1)  # seconds per minibatch of this protocol
    lower = rate * len(pairs) * len(full.seeds) * full.steps / 3600
    vals = [v for v in values if np.isfinite(v)]
    pos = sum(v > 0 for v in vals)
    measured = (f"measured here (outside the regime): {pos} of {len(vals)} seed x point values positive"
                + (f" (min {min(vals):.3g}, max {max(vals):.3g})" if vals else ""))
    price = []
    if cost.get("cpu_core_seconds"):
        price.append(f"~{cost['cpu_core_seconds'] / 3600:.0f} CPU core-hours (measured rate, full vocabulary)")
    else:
        price.append(f">= {lower:.0f} CPU-hours at this run's rate (its {c.vocab_size}-word vocabulary: a lower bound)")
    if cost.get("gpu_seconds"):
        price.append(f"~{cost['gpu_seconds'] / 3600:.1f} GPU-hours on one {cost['gpu']} (the same-size model timed in plain "
                     "PyTorch, one run at a time)")
    return (f"no in-regime point: the quick protocol trains {c.steps} minibatches per run, the paper's horizon is "
            f"{full.steps} (20 epochs; regime >= 6900). {measured}. Running the paper's protocol (tdyn figures joma "
            f"--full: {len(pairs)} (depth, lr) runs x {len(full.seeds)} seeds x {full.steps} minibatches, full "
            f"vocabulary) costs " + " or ".join(price) + "; its null control (the same network on shuffled text) "
            "was not run either")
