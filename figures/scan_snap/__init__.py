"""Scan & Snap figures and the theory-vs-practice comparison (docs/papers/scan_snap.md §3-§6).

* :mod:`.compare` — :func:`compare` (the paper row's ``compare`` slot): the trained network vs the
  T = inf ODE, where agreement breaks (:class:`~figures.report.Break` rows);
* :mod:`.claims` — the row's ``claims`` slot: the registry ``claims.toml`` (statement, regime,
  criterion, falsifier, map per claim) decided over seeds, and the functions it names;
* :mod:`.figures` — :data:`FIGURES` (the row's ``figures`` slot);
* :mod:`.fig6` — the Fig. 6 grid through the sweep runner (a multi-run study);
* :mod:`.text` — the real-text figures and claims (Figs. 7 and 10 on WikiText-2).

Direction: ``figures`` may import ``compare`` and ``claims``; ``compare`` never imports ``figures``.
The names below are re-exported; ``compare`` here is the module (the slot is ``compare.compare``).
"""

from .._lazy import lazy_exports

__all__ = ["compare_data", "theory_trajectory", "COMPARE_TOL", "FIGURES"]

# re-exports load on first use: importing the row (.paper) imports no matplotlib
__getattr__, __dir__ = lazy_exports(__name__, {
    'COMPARE_TOL': '.compare',
    'compare_data': '.compare',
    'theory_trajectory': '.lines',
    'FIGURES': '.figures',
    'compare': None,
    'figures': None,
})
