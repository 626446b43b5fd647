"""tdyn's claims machinery: a paper's headline claims as data, decided by measurement over seeds.

* :mod:`.registry` — ``claims.toml``: every claim's statement, regime (the paper's assumptions),
  protocol, statistic, criterion, falsifier and validity map, loaded and validated
  (:func:`load_registry`).
* :mod:`.stats` — the tests at a map point and over a map (seeds as the unit; simultaneous
  intervals; Holm's step-down over the map; can a test fire at these seeds?).
* :mod:`.maps` — planning a map (grid, the paper's demonstration points, the null control,
  robustness variants), running it as sweep cells under a :class:`~figures.context.RunContext`
  (store, workers, Ray), deciding every point and concluding the claim; a row's ``claims`` slot
  (:func:`registry_claims`).
* :mod:`.report` — what a decision becomes: the validity maps, tables, ``claims.json``,
  ``claims.md``, the LaTeX table and the terminal lines.

The names below are :mod:`.maps`'s, re-exported.
"""

from .maps import (decide, decide_exact, interval, grade, Decision, MapPoint, ClaimResult, decide_claim,
                   plan_claim, MapPlan, conclude, points_over_seeds, NullResult, untested, claim_cell, registry,
                   registry_claims, run_claims, theory_check, TheoryCheck, planted_violation, statistic_values,
                   VERDICTS, GRADES, MIN_SEEDS, CLAIM_CELL, ALPHA, load_registry, NoClaims, map_cost, too_costly,
                   NeedsAccelerator, CPU_CORE_HOURS, RegistryClaims, train_slot_runs)

__all__ = ["decide", "decide_exact", "interval", "grade", "Decision", "MapPoint", "ClaimResult", "decide_claim",
           "plan_claim", "MapPlan", "conclude", "points_over_seeds", "NullResult", "untested", "claim_cell", "registry",
           "registry_claims", "run_claims", "theory_check", "TheoryCheck", "planted_violation", "statistic_values",
           "VERDICTS", "GRADES", "MIN_SEEDS", "CLAIM_CELL", "ALPHA", "load_registry", "NoClaims", "map_cost",
           "too_costly", "NeedsAccelerator", "CPU_CORE_HOURS", "RegistryClaims", "train_slot_runs"]
