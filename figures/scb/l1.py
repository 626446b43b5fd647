"""SCB main figure, for real: l1-proximal preconditioned SGD vs vanilla SGD (spec §2, §6 item 1, §6.1).

Protocol (issue 9, deliver 2):

* Task: N=3, Q=2, uniform q on Q random positions, Dirichlet(1) transition (``task_seed`` 0, not
  chosen by outcome), query outside the context (Decisions 1-3).
* Methods (:mod:`empirical.scb.l1`): ``l1`` = preconditioned proximal SGD (the paper's method,
  V D^{-1}, a_k/mu_k, soft-threshold at lr*lam once <a,q>T >= 2, end-only normalisation: the spec's
  default, Decision 6); ``sgd`` = plain SGD, no preconditioner, no prox; ``l1_proj`` (full mode
  only, an ablation) = ``l1`` plus the per-step projection 1^T a_k = 1 (Decision 6 option). Each
  updates V and A with one learning rate.
* Learning rates: each method at its OWN rate, from :func:`empirical.scb.l1.largest_stable_lr`
  (geometric grid lr_min*sqrt(2)^j; stable = population loss finite and < 1.5x its initial value at
  every logged step of a ``horizon``-step run on every seed; lr_max = largest grid rate with all
  smaller ones stable; used: lr_max/sqrt(2), one grid step back), searched per (method, batch).
* lambda grid per batch B: 0 (preconditioned, no prox: an ablation), the paper's
  ``lam_paper = eps K/(Q^2 N^3)`` (spec §1.3, §6.1; eps = 0.1 target accuracy, K = tr(P Sigma P^T)),
  and ``c * sigma_B`` for c in ``lam_multiples``, where ``sigma_B`` is the per-step minibatch noise
  scale of the attention update (:func:`empirical.scb.l1.attention_noise_scale`: RMS off-support
  std of the preconditioned minibatch gradient at the ground truth). The per-step threshold lr*lam
  vs per-step noise lr*sigma_B is ``lam/sigma_B`` (column ``lam_over_sigma``).
* Early stopping (spec §6.1 decision): the logged step of minimal exact population loss (= the
  loss on an infinite held-out set); distances after the final normalisation
  ``V/colsum(V)``, ``a_k/1^T a_k`` (spec §3.5, §4): ``dist_P = |V/colsum - P|_F/|P~|_F``,
  ``dist_A = rms_k |a_k/1'a_k - q_k|``; support = exact non-zeros of the raw a_k (normalisation does
  not change it).
* Claims (:func:`figures.scb.claims.l1_claims`), at the smallest batch: the l1 run's lambda > 0 is chosen by the
  median early-stopped population (validation) loss — never by the distances the claims test.

Sizes: quick = T 128, batches 64 and 256, 3 seeds, 320k samples per run (5000 / 1250 steps), lambda
in {0, lam_paper, 1 sigma_B, 3 sigma_B}: ~40 CPU-seconds (about 2 min wall on the shared 2-core
machine). Full (``quick=False``) = T in (128, 1024, 5000), batches 64/128/256, 5 seeds,
64*max(5000, 20 T) samples per run, lambda in {0, lam_paper, 0.5, 1, 3, 10 sigma_B}, all three
methods: GPU scale, not run on the 2-core machine.

Measured (quick, task_seed 0: K = 0.097, mu = (0.15, 0.26, 0.58); ~60 CPU-s): lr_max = 0.064
(l1) and 0.0905 (sgd) at both batches, used lr 0.045 / 0.064; sigma_64 = 0.060,
sigma_256 = 0.031; lam_paper = 9.0e-5 = 0.0015 sigma_64 (its threshold never acts). Batch 64: l1
wins (early-stopped dist_P 0.36 vs 2.06, dist_A 0.23 vs 1.29: SGD at its rate leaves 2 of 3 seeds
far off), but one grid step back SGD wins narrowly (0.39 vs 0.41, 0.24 vs 0.25). Batch 256 (same
320k samples): SGD wins on P (0.65 vs 0.76), l1 on A (0.32 vs 0.61); one step back l1 wins both.
So the verdict hinges on the lr rule. No run recovers the exact support (median nnz per column
>= 95 of 128 for lam <= 3 sigma_B): a lam that zeroes the off-support noise (>~ 3 sigma_B) exceeds
the on-support signal K zeta q ~ 0.05 zeta of spec §3.5 at these batches, and the l1 degeneracy
(a -> a/c, V -> cV) inflates the gradient noise during training. Early stopping at the validation
minimum misses the transient dip of dist_P (oracle minimum 0.03-0.18 for l1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr

from empirical.scb import l1 as el1
from empirical.sweeps import Cell, CellsFailed, load_cells, run_cells
from theory import scb

from ..core import finish_figure, save_table
from ..sweep import sweep_settings

__all__ = ["L1Settings", "settings", "l1_study", "study", "selected", "fig_l1_vs_sgd", "paper_lambda", "study_cell",
           "CELL_FN"]


COLORS = {"sgd": "k", "l1": "tab:red", "l1_proj": "tab:green"}
MARKERS = {"sgd": "o", "l1": "s", "l1_proj": "^"}
METHOD_LABELS = {"sgd": "vanilla SGD", "l1": r"$\ell_1$-proximal", "l1_proj": r"$\ell_1$-proximal + projection"}


@dataclasses.dataclass(frozen=True)
class L1Settings:
    """The study's own grid. The task and the l1 switch are the config ``config`` (default: the
    preset ``SCBConfig.preset("l1_study")``: N, Q, task_seed, lam_switch); ``Ts`` its context
    lengths. Every run gets the same sample budget ``samples`` (``samples // batch`` steps;
    0 = ``64 * max(5000, 20 T)``), logged (early-stop candidates) at ``n_log`` evenly spaced steps;
    lr search: ``horizon`` steps on the grid ``lr_min * sqrt(2)^j``, j < n_grid; ``methods`` of
    :data:`empirical.scb.l1.METHODS`."""

    Ts: tuple[int, ...] = (128,)
    batches: tuple[int, ...] = (64,)
    seeds: tuple[int, ...] = (0, 1, 2)
    samples: int = 320_000
    n_log: int = 100
    methods: tuple[str, ...] = ("l1", "sgd")
    horizon: int = 300
    lr_min: float = 2e-3
    n_grid: int = 16
    lam_multiples: tuple[float, ...] = (1.0, 3.0)
    eps: float = 0.1
    config: scb.SCBConfig = dataclasses.field(default_factory=lambda: scb.SCBConfig.preset("l1_study"))

    def steps(self, T: int, B: int) -> tuple[int, int]:
        """``(steps, log_every)`` of one run at context ``T`` and batch ``B``."""
        samples = self.samples or 64 * max(5000, 20 * T)  # full mode: stage 1 needs ~T^2 samples (spec §3.4)
        steps = max(1, samples // B)
        return steps, max(1, steps // self.n_log)


def settings(quick: bool = True, **overrides) -> L1Settings:
    """Quick (``make figures``) or full (``--full``) sizes, with overrides (tests use tiny ones)."""
    if quick:
        base = L1Settings(batches=(64, 256))
    else:
        base = L1Settings(Ts=(128, 1024, 5000), batches=(64, 128, 256), seeds=(0, 1, 2, 3, 4),
                          samples=0, methods=el1.METHODS, horizon=1000, lr_min=1e-5, n_grid=40,
                          lam_multiples=(0.5, 1.0, 3.0, 10.0))
    return dataclasses.replace(base, **overrides)


def paper_lambda(task, eps: float) -> float:
    """``lam = eps K_P / (Q^2 N^3)`` (spec §1.3, §6.1), with ``K_P`` read as ``K = tr(P Sigma P^T)``."""
    Q = task.support.shape[1]
    return float(eps * task.K / (Q**2 * task.N**3))


#: the sweep cell function (importable in every worker, :func:`empirical.sweeps.run_cells`)
CELL_FN = "figures.scb.l1:study_cell"
#: the per-run, per-log-point arrays a "runs" cell keeps (all the rows and curves need)
_KEEP = ("population_loss", "value_relative_distance_to_truth", "attention_distance_to_truth",
         "nnz_mean", "nnz_max", "support")


def study_cell(paper: str, config: dict, *, device: str = "cpu") -> xr.Dataset:
    """One cell of the study, run by :func:`empirical.sweeps.run_cells` (``paper`` = "scb").

    ``config["part"] == "lr"``: the lr search of one (T, batch, method) over every seed (attrs
    ``lr_max, lr, ratio``; vars ``grid``, ``stable``). ``"runs"``: every run of one (T, batch) —
    methods x lambdas x seeds x lr backoffs, learning rates ``config["lr"][method]`` from the "lr"
    cells — in ONE batched :func:`empirical.scb.l1.train_runs` call, as before the sweep (the
    batch composition is kept: the numbers are identical); vars over (run, log) of :data:`_KEEP`,
    attrs ``sigma`` (sigma_B), ``lam_paper``, ``K``."""
    c = config
    task = scb.make_task(scb.SCBConfig(N=c["N"], T=c["T"], Q=c["Q"], task_seed=c["task_seed"]))
    seeds, B = tuple(c["seeds"]), c["batch"]
    if c["part"] == "lr":
        r = el1.largest_stable_lr(task, c["method"], batch=B, seeds=seeds, horizon=c["horizon"],
                                  lr_min=c["lr_min"], n_grid=c["n_grid"], device=device)
        return xr.Dataset({"grid": ("j", r["grid"]), "stable": ("j", r["stable"].astype(np.int8))},
                          attrs={"lr_max": r["lr_max"], "lr": r["lr"], "ratio": r["ratio"]})
    sigma = el1.attention_noise_scale(task, B, device=device)
    lams = [0.0, paper_lambda(task, c["eps"])] + [m * sigma for m in c["lam_multiples"]]
    lr, ratio = c["lr"], c["ratio"]
    specs = [(m, lam) for m in c["methods"] for lam in (lams if m != "sgd" else [0.0]) if np.isfinite(lr[m])]
    # backoff 1 = the documented rule (lr_max / ratio); 2 = one more grid step back (the
    # sensitivity of the verdicts to the rule, reported as evidence only)
    backoff = [b_ for b_ in (1, 2) for m, lam in specs for sd in seeds]
    runs = [el1.RunSpec(m, lr[m] / ratio[m] ** (b_ - 1), lam, sd) for b_ in (1, 2) for m, lam in specs for sd in seeds]
    out = el1.train_runs(task, runs, batch=B, steps=c["steps"], log_every=c["log_every"],
                         lam_switch=c["lam_switch"], device=device)
    return xr.Dataset(
        {k: (("run", "log"), np.asarray(out[k]).astype(np.int8) if k == "support" else out[k]) for k in _KEEP},
        coords={"step": ("log", out["step"]), "method": ("run", [r.method for r in runs]),
                "lr": ("run", [r.lr for r in runs]), "lam": ("run", [r.lam for r in runs]),
                "seed": ("run", [r.seed for r in runs]), "backoff": ("run", backoff)},
        attrs={"sigma": sigma, "lam_paper": lams[1], "K": task.K})


def _cells(s: L1Settings, part: str, device: str, **extra) -> list[Cell]:
    c = s.config
    base = {"N": c.N, "Q": c.Q, "task_seed": c.task_seed, "seeds": list(s.seeds)}
    out = []
    for T in s.Ts:
        for B in s.batches:
            if part == "lr":
                cfg = {**base, "T": T, "batch": B, "horizon": s.horizon, "lr_min": s.lr_min, "n_grid": s.n_grid}
                out += [Cell("scb", {**cfg, "part": "lr", "method": m}, "l1_study", {"device": device},
                             {"part": "lr", "T": T, "batch": B, "method": m}) for m in s.methods]
            else:
                steps, log_every = s.steps(T, B)
                lr = extra["lrs"]
                cfg = {**base, "T": T, "batch": B, "part": "runs", "steps": steps, "log_every": log_every,
                       "lam_switch": c.lam_switch, "eps": s.eps, "lam_multiples": list(s.lam_multiples),
                       "methods": list(s.methods), "lr": {m: lr[(T, B, m)]["lr"] for m in s.methods},
                       "ratio": {m: lr[(T, B, m)]["ratio"] for m in s.methods}}
                out.append(Cell("scb", cfg, "l1_study", {"device": device}, {"part": "runs", "T": T, "batch": B}))
    return out


def _run(cells: list[Cell], root: Path, workers: int, ray: str | None, computed: list) -> list[xr.Dataset]:
    idx = run_cells(CELL_FN, cells, root, workers=workers, ray=ray, progress=lambda k, st, e: computed.append(k))
    if (idx.status != "ok").any():
        raise CellsFailed(root, idx)
    return load_cells(root, cells)


#: finished studies by (settings, device): where their cells ran (store, workers, Ray) does not
#: change the numbers, so the figure and the claims share one study whatever their stores
_STUDIES: dict[tuple[L1Settings, str], tuple[pd.DataFrame, dict]] = {}


def _study(s: L1Settings, device: str, store: str | None = None, workers: int = 1,
           ray: str | None = None) -> tuple[pd.DataFrame, dict]:
    """The study through the sweep store (``store``; a temporary folder when None): "lr" cells,
    then one "runs" cell per (T, batch); once per (settings, device) and process (:data:`_STUDIES`).
    ``df.attrs["cells_computed"]``: cells run by the call that computed it (0 when every cell was
    already in the store)."""
    if (s, device) not in _STUDIES:
        _STUDIES[(s, device)] = _study_through_store(s, device, store, workers, ray)
    return _STUDIES[(s, device)]


def _study_through_store(s: L1Settings, device: str, store: str | None, workers: int,
                         ray: str | None) -> tuple[pd.DataFrame, dict]:
    computed: list[str] = []
    with contextlib.ExitStack() as stack:
        root = Path(store) if store is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        lr_cells = _cells(s, "lr", device)
        lrs = {(c.config["T"], c.config["batch"], c.config["method"]): ds.attrs
               for c, ds in zip(lr_cells, _run(lr_cells, root, workers, ray, computed))}
        run_cells_ = _cells(s, "runs", device, lrs=lrs)
        # the lr cells again (already done: skipped) so that the store's index lists every cell
        results = _run(lr_cells + run_cells_, root, workers, ray, computed)[len(lr_cells):]
    rows, curves = [], {}
    for c, ds in zip(run_cells_, results):
        T, B = c.config["T"], c.config["batch"]
        out = {k: ds[k].values.astype(bool) if k == "support" else ds[k].values for k in _KEEP}
        step = ds["step"].values
        runs = [el1.RunSpec(str(m), float(lr), float(lam), int(sd))
                for m, lr, lam, sd in zip(ds.method.values, ds.lr.values, ds.lam.values, ds.seed.values)]
        backoff = [int(b) for b in ds.backoff.values]
        sigma, Lpop = float(ds.attrs["sigma"]), out["population_loss"]
        for i, r in enumerate(runs):
            b = int(np.nanargmin(np.where(np.isfinite(Lpop[i]), Lpop[i], np.inf)))
            rows.append({
                "method": r.method, "T": T, "batch": B, "seed": r.seed, "lr": r.lr, "lr_backoff": backoff[i],
                "lr_max": float(lrs[(T, B, r.method)]["lr_max"]), "lam": r.lam, "lam_over_sigma": r.lam / sigma,
                "sigma": sigma, "lam_paper": float(ds.attrs["lam_paper"]), "K": float(ds.attrs["K"]),
                "nnz_mean": float(out["nnz_mean"][i, b]), "nnz_max": int(out["nnz_max"][i, b]),
                "support_recovered": bool(out["support"][i, b]),
                "dist_P": float(out["value_relative_distance_to_truth"][i, b]),
                "dist_A": float(out["attention_distance_to_truth"][i, b]),
                "val_loss": float(Lpop[i, b]), "early_stop_step": int(step[b]),
                "samples_at_early_stop": int(step[b]) * B,
                "final_dist_P": float(out["value_relative_distance_to_truth"][i, -1]),
                "final_dist_A": float(out["attention_distance_to_truth"][i, -1]),
                "final_nnz_mean": float(out["nnz_mean"][i, -1]),
                # oracle (not used by the claims): the best distance over the logged steps
                "min_dist_P": float(np.nanmin(out["value_relative_distance_to_truth"][i])),
                "min_dist_A": float(np.nanmin(out["attention_distance_to_truth"][i])),
                "diverged": bool(not np.all(np.isfinite(Lpop[i]))),
            })
        curves[(T, B)] = {"samples": step * B, "runs": runs, "backoff": backoff,
                          "dist_P": out["value_relative_distance_to_truth"],
                          "dist_A": out["attention_distance_to_truth"], "nnz_mean": out["nnz_mean"]}
    df = pd.DataFrame(rows)
    df.attrs["cells_computed"] = len(computed)
    return df, curves


def l1_study(quick: bool = True, device: str = "auto", *, store=None, workers: int = 1, ray: str | None = None,
             **overrides) -> pd.DataFrame:
    """One row per method x lambda x T x batch x seed x lr_backoff. Columns: ``method, T, batch, seed,
    lr, lr_backoff`` (1: the documented rule lr_max/ratio, used by the figure and the claims; 2: one
    more grid step back, a sensitivity check), ``lr_max,
    lam, lam_over_sigma, sigma`` (sigma_B), ``lam_paper, K``; at the early stop (min population
    loss over the logged steps): ``nnz_mean, nnz_max`` (exact non-zeros per attention column),
    ``support_recovered`` (every column's support = S_k), ``dist_P, dist_A`` (after the final
    normalisation), ``val_loss, early_stop_step, samples_at_early_stop``; at the end:
    ``final_dist_P, final_dist_A, final_nnz_mean``; ``min_dist_P, min_dist_A`` (oracle minimum over
    the logged steps, diagnostics only), ``diverged``. Same settings and device -> cached (the
    figure and the claims share one study).

    The cells run through :func:`empirical.sweeps.run_cells` (:func:`study_cell`): ``store`` a folder
    (finished cells are read back, an interrupted study resumes; None: a temporary folder),
    ``workers`` local processes or ``ray`` (an address or "auto"). ``df.attrs["cells_computed"]``
    counts the cells this call computed."""
    return _study(settings(quick, **overrides), device, _store_key(store), workers, ray)[0].copy()


def study(s: L1Settings, device: str = "auto", store=None, workers: int = 1, ray: str | None = None) -> pd.DataFrame:
    """The study's table for the settings ``s`` (as :func:`l1_study`; shared, once per process)."""
    return _study(s, device, _store_key(store), workers, ray)[0].copy()


def _store_key(store) -> str | None:
    return None if store is None else str(Path(store).resolve())


def selected(df: pd.DataFrame, method: str = "l1") -> pd.DataFrame:
    """``method``'s rows at the lambda > 0 with the smallest median early-stopped validation loss,
    per (T, B)."""
    l1 = df[(df.method == method) & (df.lam > 0)]
    med = l1.groupby(["T", "batch", "lam"]).val_loss.median().reset_index()
    best = med.loc[med.groupby(["T", "batch"]).val_loss.idxmin(), ["T", "batch", "lam"]]
    return l1.merge(best, on=["T", "batch", "lam"])


def fig_l1_vs_sgd(outdir: Path | None = None, quick: bool = True, *, device: str = "auto", store=None,
                  workers: int | None = None, ray: str | None = None, **overrides) -> dict[str, Any]:
    """Distance to ground truth (after normalisation) vs samples: l1 and l1_proj (validation-selected
    lambda > 0; l1's other lambdas dashed) vs vanilla SGD, median and min-max band over seeds, one row per (T, batch).
    Writes ``scb_l1_vs_sgd.png`` and ``scb_l1_study.csv`` into ``outdir``. The study is a grid of
    runs (see :func:`l1_study`): ``store``, ``workers``, ``ray`` default to the CLI's
    ``--store/--workers/--ray`` (store ``DIR/scb-l1``) inside ``tdyn figures``, else to
    ``outdir/scb_l1_store``, one worker, no Ray (a rerun reads the finished cells)."""
    s = settings(quick, **overrides)
    opts = sweep_settings("scb-l1", None if outdir is None else Path(outdir) / "scb_l1_store")
    store = opts["store"] if store is None else store
    workers = opts["workers"] if workers is None else workers
    ray = opts["ray"] if ray is None else ray
    df_all, curves = _study(s, device, _store_key(store), workers, ray)
    df = df_all[df_all.lr_backoff == 1]
    sel = pd.concat([selected(df, m) for m in s.methods if m != "sgd"])
    keys = list(curves)
    fig, axes = plt.subplots(len(keys), 2, figsize=(9, 3.0 * len(keys) + 0.8), squeeze=False, layout="constrained")
    titles = [r"value: $\|V/\mathbf{1}^\top V - P\|_F \,/\, \|\tilde P\|_F$",
              r"attention: $\mathrm{rms}_k \|a_k/\mathbf{1}^\top a_k - q_k\|$"]
    for row, (T, B) in zip(axes, keys):
        c = curves[(T, B)]
        here = sel[(sel["T"] == T) & (sel.batch == B)]
        lam_sel = {m: float(g.lam.iloc[0]) for m, g in here.groupby("method")}
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(c["runs"]):
            if c["backoff"][i] == 1:
                groups.setdefault((r.method, r.lam), []).append(i)
        sigma = df[(df["T"] == T) & (df.batch == B)].sigma.iloc[0]
        others = sorted(lam for (m, lam) in groups if m == "l1" and lam != lam_sel.get(m))
        for ax, key, title in zip(row, ["dist_P", "dist_A"], titles):
            for (m, lam), idx in groups.items():
                y = c[key][idx]
                main = m == "sgd" or lam == lam_sel.get(m)
                if m == "l1_proj" and not main:
                    continue
                name = METHOD_LABELS.get(m, m)
                lam_txt = rf"$\lambda$={lam:.2g} ({lam / sigma:.2g} $\sigma$)"
                if main:
                    label = name if m == "sgd" else f"{name}, selected {lam_txt}"
                    line, = ax.plot(c["samples"], np.median(y, 0), lw=1.6, ls="-", color=COLORS[m],
                                    marker=MARKERS[m], markevery=0.1, ms=4, label=label, zorder=4)
                    ax.fill_between(c["samples"], y.min(0), y.max(0), color=line.get_color(), alpha=0.2)
                else:  # l1's other lambdas: dashed, shades of one colour, lambda = 0 dotted on top
                    shade = 0.35 + 0.5 * (others.index(lam) if lam in others else 0) / max(1, len(others) - 1)
                    ax.plot(c["samples"], np.median(y, 0), lw=1.0, ls=":" if lam == 0 else "--",
                            color=plt.cm.Reds(shade), zorder=5 if lam == 0 else 3,
                            label=f"{name}, {lam_txt}" + (" (no shrinkage)" if lam == 0 else ""))
            ax.set_yscale("log")
            ax.set_xlabel("samples seen")
            ax.set_ylabel("distance to ground truth")
            ax.set_title(f"$T={T}$, batch {B}; {title}")
    legend = {}
    for ax in axes.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(lab, h)
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncols=2)
    fig.suptitle(f"SCB $N={s.config.N}$, $Q={s.config.Q}$: " + r"$\ell_1$-proximal vs vanilla SGD, each at its own "
                 f"largest stable lr (median and min-max over {len(s.seeds)} seeds)")
    png = finish_figure(fig, outdir, "scb_l1_vs_sgd.png")
    save_table(df_all, outdir, "scb_l1_study.csv")
    return {"study": df_all.copy(), "curves": curves, "selected": sel, "png": png}
