"""Scan & Snap on real text (docs/papers/scan_snap.md §5.6): the WikiText-2 figures (Figs. 7 and 10)
and the claims decided on the same runs.

The protocol is :class:`empirical.scan_snap.text.ScanSnapTextConfig` (the paper row's ``text``
slot); its runs happen once per process and setting (:func:`figures.realtext.results`, shared
with the other papers). The claims (``text_claims.toml``: Fig. 10's higher lr => lower entropy,
Fig. 7's sparsify-and-freeze) are :class:`~figures.claims.ClaimResult` s decided over seeds by
:func:`text_claim_results` (the row's ``claims`` slot appends them). Without a corpus the figures
are skipped with a note and the real-text claims are untested (how to get the corpus).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import matplotlib.pyplot as plt  # the Agg backend: figures/__init__ imports figures.core first
import numpy as np
import pandas as pd

from theory.scan_snap import PAPER

from ..context import RunContext
from ..core import finish_figure, save_table
from ..realtext import corpus_available, results, runs_dir

__all__ = ["fig_scan_snap_maps", "fig_scan_snap_entropy_vs_lr", "text_claim_results", "decide", "text_registry",
           "entropy_lr_slope", "late_over_early", "TEXT_CLAIMS"]


def _corpus_or_note(ctx: RunContext) -> bool:
    """Whether ``ctx``'s corpus is there; if not, a note on stderr (the real-text figures are skipped)."""
    if corpus_available(ctx.corpus):
        return True
    print(f"note: {PAPER}: no WikiText corpus at {ctx.corpus_dir()}; real-text figure skipped", file=sys.stderr)
    return False


def fig_scan_snap_maps(outdir, quick: bool = True, *, device: str = "auto",
                       ctx: RunContext | None = None) -> pd.DataFrame | None:
    """Fig. 7: lowest-layer attention maps (batch element 0 of training chunk 101) per model and
    logged step; the table (``wikitext_fig7_attention_maps.csv``) has each map's entropy and its
    Frobenius change since the previous one. None (and a note) without a corpus."""
    ctx = RunContext.of(ctx, quick=quick, device=device)
    if not _corpus_or_note(ctx):
        return None
    res = results(PAPER, ctx, store=runs_dir(outdir))
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
                                ctx: RunContext | None = None) -> pd.DataFrame | None:
    """Fig. 10: validation attention entropy of 1-layer models vs SGD learning rate, mean +- 1 std
    over seeds (table: ``wikitext_fig10_entropy_vs_lr.csv``). None (and a note) without a corpus."""
    ctx = RunContext.of(ctx, quick=quick, device=device)
    if not _corpus_or_note(ctx):
        return None
    res = results(PAPER, ctx, store=runs_dir(outdir))
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


#: the real-text claims (registry format, docs/claims.md), decided on the protocol's own runs
TEXT_CLAIMS = Path(__file__).with_name("text_claims.toml")


def entropy_lr_slope(traj, config=None, *, lr: float | None = None) -> float:
    """One seed's least-squares slope of the final validation attention entropy (``traj["entropy"]``,
    dim ``lr``) on the learning rate over ``[lr, the next larger lr]`` (``lr=None``: over the whole
    sweep), nats per unit of lr: negative when the entropy falls as lr grows. NaN when a value is
    not finite or the window holds fewer than two learning rates."""
    x = np.asarray(traj["lr"].values, dtype=np.float64)
    y = np.asarray(traj["entropy"].values, dtype=np.float64)
    order = np.argsort(x)
    x, y = x[order], y[order]
    if lr is not None:
        i = int(np.flatnonzero(np.isclose(x, lr))[0]) if np.isclose(x, lr).any() else -1
        if i < 0 or i + 1 >= x.size:
            return float("nan")
        x, y = x[i:i + 2], y[i:i + 2]
    if x.size < 2 or not np.all(np.isfinite(y)):
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def late_over_early(traj, config=None, *, aspect: str) -> float:
    """One Fig. 7 run (``entropy_layer0`` and ``snapshot`` (time, query, key) over the logged
    minibatches): ``aspect="sparsity"``: ``ln(H(T)/H(0))`` of the lowest layer's validation attention
    entropy; ``aspect="freezing"``: ``ln(|A(T) - A(T - dt)|_F / |A(dt) - A(0)|_F)`` of the logged map
    over the last and the first logging interval. Negative when the late value is the smaller; NaN
    with fewer than three logged maps (freezing) or a zero first change."""
    if aspect == "sparsity":
        H = np.asarray(traj["entropy_layer0"].values, dtype=np.float64)
        return float(np.log(H[-1] / H[0])) if H[0] > 0 and H[-1] > 0 else float("nan")
    if aspect != "freezing":
        raise ValueError(f"aspect must be 'sparsity' or 'freezing', got {aspect!r}")
    A = np.asarray(traj["snapshot"].values, dtype=np.float64)
    if A.shape[0] < 3:
        return float("nan")
    first, last = np.linalg.norm(A[1] - A[0]), np.linalg.norm(A[-1] - A[-2])
    return float(np.log(last / first)) if first > 0 and last > 0 else float("nan")


def text_registry():
    """The real-text claims' registry (``text_claims.toml``), validated (its runs are the
    protocol's, so there is no Config to check its map against)."""
    from ..claims.registry import load_registry

    return load_registry(TEXT_CLAIMS, paper=PAPER, resolve=True)


def _per_seed_sweeps(df: pd.DataFrame) -> list:
    """Fig. 10's table as one Dataset (``entropy`` over ``lr``) per seed, in seed order."""
    import xarray as xr

    return [xr.Dataset({"entropy": ("lr", g["entropy"].to_numpy(float))}, coords={"lr": g["lr"].to_numpy(float)})
            for _, g in df.sort_values(["seed", "lr"]).groupby("seed", sort=True)]


def _regime(claim, values: dict) -> tuple[bool, tuple[str, ...]]:
    """Whether the protocol's ``values`` (regime quantity -> value) lie inside every bound of
    ``claim``'s regime, and the violated ones in words."""
    bad = tuple(f"{b.label or b.quantity} = {values[b.quantity]:g}, regime {b.describe()}"
                for b in claim.regime if not b.contains(values[b.quantity]))
    return not bad, bad


def text_claim_results(ctx: RunContext, *, level: float = 0.95) -> list:
    """The real-text claims as :class:`~figures.claims.ClaimResult` s, on the protocol's runs (shared
    with the figures: :func:`figures.realtext.results`), per seed: Fig. 10's map points are the
    adjacent learning-rate pairs of the sweep, Fig. 7's a (model, aspect) each; decided at the
    simultaneous level where the runs are in the paper's setting and there are >= 5 seeds, else
    untested with the reason and the cost of deciding (every claim untested without a corpus)."""
    if not corpus_available(ctx.corpus):
        from ..realtext import no_corpus_claims

        return no_corpus_claims(text_registry(), quick=ctx.quick)
    return decide(results(PAPER, ctx), quick=ctx.quick, level=level)


def decide(res, *, quick: bool = True, level: float = 0.95) -> list:
    """:func:`text_claim_results` on the protocol's results ``res`` (``config``, ``sweep``,
    ``fig7_runs``, ``seconds``, ``fig7_seconds``)."""
    from dataclasses import replace

    from ..claims import MIN_SEEDS, conclude, points_over_seeds

    c, reg = res["config"], text_registry()
    out = []
    # Fig. 10: one point per adjacent pair of learning rates
    claim = reg.get("wikitext_higher_lr_lower_entropy")
    inside, why = _regime(claim, {"sweep_steps": c.sweep_steps, "vocab_size": c.vocab_size})
    sweeps = _per_seed_sweeps(res["sweep"])
    lrs = sorted(c.sweep_lrs)
    cells = [({"lr": lo}, [entropy_lr_slope(t, c, lr=lo) for t in sweeps]) for lo in lrs[:-1]]
    pts = points_over_seeds(claim, cells, lambda co: (inside, why))
    n10 = len(sweeps)
    runs_full, n_full = len(_full().sweep_lrs) * max(len(_full().seeds), MIN_SEEDS), _full().sweep_steps
    note = _undecided_note(
        pts, n10, why, seconds_per_step=_fig10_seconds(res) / max(len(c.sweep_lrs) * n10 * c.sweep_steps, 1),
        full=f"{runs_full} runs x {n_full} minibatches", full_steps=runs_full * n_full,
        seed_cost=_fig10_seconds(res) / max(n10, 1))
    r = conclude(claim, pts, quick=quick, level=level, untested=note)
    if r.regime_points and n10 < MIN_SEEDS:
        r = replace(r, where_it_breaks=note)
    out.append(r)
    # Fig. 7: one point per model and aspect
    claim = reg.get("wikitext_attention_sparsifies_and_freezes")
    inside, why = _regime(claim, {"steps": c.steps, "vocab_size": c.vocab_size})
    runs = res["fig7_runs"]
    cells = [({"n_layer": L, "aspect": a}, [late_over_early(t, c, aspect=a) for t in runs[L]])
             for L in c.layers for a in ("sparsity", "freezing")]
    pts = points_over_seeds(claim, cells, lambda co: (inside, why))
    n7 = min(len(v) for v in runs.values())
    full = _full()
    steps_full = sum(full.layers) * full.steps * max(len(full.fig7_seeds), MIN_SEEDS)  # a layer-step each
    note = _undecided_note(
        pts, n7, why, seconds_per_step=res["fig7_seconds"] / max(sum(c.layers) * c.steps * n7, 1),
        full=f"{len(full.layers)} models ({'+'.join(map(str, full.layers))} layers) x {full.steps} minibatches "
             f"x {max(len(full.fig7_seeds), MIN_SEEDS)} seeds", full_steps=steps_full,
        seed_cost=res["fig7_seconds"] / max(n7, 1))
    r = conclude(claim, pts, quick=quick, level=level, untested=note)
    if r.regime_points and n7 < MIN_SEEDS:
        r = replace(r, where_it_breaks=note)
    out.append(r)
    return out


def _full():
    from empirical.scan_snap.text import ScanSnapTextConfig

    return ScanSnapTextConfig.full()


def _fig10_seconds(res) -> float:
    return res["seconds"] - res["fig7_seconds"]


def _undecided_note(points, n_seeds: int, why: tuple, *, seconds_per_step: float, full: str, full_steps: int,
                    seed_cost: float) -> str:
    """Why a real-text claim stays inconclusive, the measured values, and what deciding it costs:
    the quick protocol's missing seeds (``seed_cost`` CPU-s each) and the paper's setting at this
    run's rate per (layer-)minibatch (a lower bound: the full vocabulary's output layer is larger)."""
    from ..claims import MIN_SEEDS

    vals = [v for p in points for v in p.values if math.isfinite(v)]
    below = sum(v < 0 for v in vals)
    reasons = ([f"{n_seeds} seed(s): a verdict needs >= {MIN_SEEDS} (~{seed_cost:.0f} CPU-s per further seed of "
                f"the quick protocol)"] if n_seeds < MIN_SEEDS else []) + [f"outside the regime ({'; '.join(why)})"] * bool(why)
    cpu_h = seconds_per_step * full_steps / 3600
    measured = (f"{below} of {len(vals)} seed x map-point values below 0 (min {min(vals):.3g}, max {max(vals):.3g})"
                if vals else "no finite value")
    # GPU estimate: the quick runs' CPU rate over the ~50x throughput of one H100 on these small
    # (d = 200, batch 20) transformer steps, an assumption, not measured here
    return (f"not decided: {'; '.join(reasons)}; measured: {measured}. The paper's setting (tdyn figures scan-snap "
            f"--full: {full}, full vocabulary) takes >= ~{cpu_h:.1f} CPU core-hours at this run's measured rate "
            f"({seconds_per_step * 1e3:.3g} CPU-ms per (layer-)minibatch), ~{cpu_h * 60 / 50:.0f} GPU-minutes on one "
            f"H100 if it runs ~50x faster (an estimate, not measured)")
