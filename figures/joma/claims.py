"""JoMA's headline claims (papers/joma.md §2.2, §2.5, §3.4), decided by measurement.

Each function takes the measurements of :mod:`.compare` and returns a :class:`~figures.report.Claim`
(the statement with its criterion, the verdict, the numbers behind it, the regime):

* :func:`invariant_claim` — Theorem 1 (softmax): NC of the changes of ``zhat`` and ``z`` stays
  >= :data:`NC_FLOOR` at every logged time on the real network, every data seed;
* :func:`entropy_claim` — Theorem 4: the entropy of the attention the network computes drops,
  then bounces (:func:`bounce_numbers`, :func:`bounces`), every data seed;
* :func:`learning_order_claim` — §3.4: tokens whose lowest common ancestor with the query is
  lowest are learned first (mean half-times per LCA height).

The real-text claims (Figs. 6 and 8) are in :mod:`.text`.
"""

from __future__ import annotations

import numpy as np

from theory import joma as J

from ..report import Claim

__all__ = ["invariant_claim", "entropy_claim", "learning_order_claim", "bounce_numbers", "bounces", "NC_FLOOR",
           "BOUNCE_FRACTION"]

#: Theorem 1 (softmax) "holds" when NC of the changes (spec §5 Fig. 2 metric) stays >= this
NC_FLOOR = 0.9
#: a "bounce": after its interior minimum the entropy regains >= this fraction of its drop
BOUNCE_FRACTION = 0.1


def bounce_numbers(t, H) -> dict:
    """Drop-and-bounce numbers of an entropy curve on its own time axis (no normalisation)."""
    H = np.asarray(H, float)
    i = int(np.argmin(H))
    drop = float(H[0] - H[i])
    rebound = float(H[i:].max() - H[i])
    return {"H0": float(H[0]), "H_min": float(H[i]), "t_min": float(t[i]), "H_max_after_min": float(H[i:].max()),
            "H_end": float(H[-1]), "drop": drop, "bounce_fraction": rebound / drop if drop > 0 else 0.0,
            "interior_min": bool(0 < i < len(H) - 1), "single_turning_point": J.drops_then_bounces(H, 1e-9)}


def bounces(nums: dict) -> bool:
    """The criterion on :func:`bounce_numbers`: an interior minimum, a drop >= 5% of ``H0`` and a
    rebound >= :data:`BOUNCE_FRACTION` of the drop."""
    return bool(nums["interior_min"] and nums["drop"] >= 0.05 * nums["H0"]
                and nums["bounce_fraction"] >= BOUNCE_FRACTION)


def invariant_claim(headlines: list[dict], seeds, regime: str) -> Claim:
    """Theorem 1 (softmax) on the headline network of every data seed (``headlines[0]``: seed 0,
    whose residuals and the ODE's own NC are the evidence)."""
    h = headlines[0]
    ncs = [x["traj"]["nc_change"].values[1:] for x in headlines]
    res = h["traj"]["invariant_residual_rel"].values
    ev = {"nc_change_min": float(ncs[0].min()), "nc_change_end": float(ncs[0][-1]),
          "residual_rel_end": float(res[-1]), "residual_rel_at_window_end": float(res[h["window"]][-1]),
          "ode_nc_change_min": float(h["nc_ode"].min()), "ode_residual_rel_end": float(h["res_ode"][-1])}
    if len(headlines) > 1:
        ev["nc_change_min_per_seed"] = [float(n.min()) for n in ncs]
    return Claim("invariant_holds",
                 "Theorem 1 (softmax): z(t) follows zhat = sum_k v_k^2/(2T) - bbar sum_k |v_k|^2/(2T) + c; "
                 f"decided as NC(zhat - zhat0, z - z0) >= {NC_FLOOR} at every logged t > 0 on the real network"
                 f" (every data seed of {list(seeds)})",
                 all(bool(n.min() >= NC_FLOOR) for n in ncs), ev, regime)


def entropy_claim(headlines: list[dict], seeds, regime: str) -> Claim:
    """Theorem 4's drop and bounce of the network's attention entropy, every data seed; the ODE's
    own curve (seed 0) as evidence."""
    h = headlines[0]
    bns = [bounce_numbers(x["time"], x["H_net"]) for x in headlines]
    bn, bo = bns[0], bounce_numbers(h["time"], h["H_ode"])
    ev = {**{f"net_{k}": v for k, v in bn.items()}, **{f"ode_{k}": v for k, v in bo.items()}}
    if len(headlines) > 1:
        ev["net_bounce_fraction_per_seed"] = [b["bounce_fraction"] for b in bns]
    return Claim("entropy_drops_then_bounces",
                 "the entropy of the attention the network computes first drops, then rises again (Theorem 4); "
                 "decided as an interior minimum, a drop >= 5% of H0, and a rebound >= "
                 f"{BOUNCE_FRACTION:.0%} of the drop"
                 f" (every data seed of {list(seeds)})",
                 all(bounces(b) for b in bns), ev, regime)


def learning_order_claim(order: dict) -> Claim:
    """§3.4 on :func:`.compare.learning_order`'s half-times: the mean at LCA height 1 is below that of
    every higher LCA."""
    by_h = order["by_height"]
    return Claim("learning_order_lowest_LCA_first",
                 "tokens whose lowest common ancestor with the query is lowest (H = 1) are learned first: "
                 "their mean half-time is below that of every higher LCA (spec §3.4)",
                 bool(by_h.loc[1] < by_h.drop(1).min()),
                 {**{f"mean_half_time_H{int(k)}": float(v) for k, v in by_h.items()},
                  "spearman_tokens": order["spearman_attention"],
                  "spearman_height_means": order["spearman_height_means"],
                  "spearman_mlp": order["spearman_mlp"], "seeds": len(set(order["table"]["seed"]))},
                 "HBLT block: depth 4, binary, rho 0.7, softmax attention, logistic loss, SGD lr 1, 1500 steps")
