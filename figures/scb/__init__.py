"""SCB figures and the theory-vs-practice comparison (docs/papers/scb.md §3.4, §4, §5, §6).

* :mod:`.compare` — :func:`compare` (the paper table's ``compare`` slot) -> a
  :class:`~figures.report.Report`, and the data the report and the figures share;
* :mod:`.claims` — the headline claims and the code deciding them;
* :mod:`.figures` — :data:`FIGURES` (the table's ``figures`` slot; ``figures.make.make_figures``
  collects their files and writes ``report.json``);
* :mod:`.calibration` — the minibatch SDE against real SGD: coverage at 50/80/90%, variance
  ratios, the (eta_A, batch) map, the SDE claim's functions (``claims.toml``: sde_band_coverage) and
  SVAG's weak error vs l (Li, Malladi & Arora 2021);
* :mod:`.l1` — the l1-proximal vs vanilla SGD figure, from the l1 claims' runs.

Direction: figures -> l1 -> claims; figures -> compare -> claims; compare never imports figures.
"""

from .._lazy import lazy_exports

__all__ = [
    "compare", "agreement_breakdown", "overlay_data", "escape_time_table", "transfer_table", "ode_for",
    "escape_formula_value", "spec_escape_times",
    "FIGURES", "fig_overlay", "fig_escape_time", "fig_transfer", "fig_softmax_vs_linear", "fig_l1_vs_sgd",
    "fig_svag", "TOLERANCE", "BAND_LEVELS",
]

# re-exports load on first use: importing the row (.paper) imports no matplotlib
__getattr__, __dir__ = lazy_exports(__name__, {
    'BAND_LEVELS': '.calibration',
    'TOLERANCE': '.compare',
    'agreement_breakdown': '.compare',
    'escape_formula_value': '.compare',
    'escape_time_table': '.compare',
    'ode_for': '.calibration',
    'overlay_data': '.calibration',
    'spec_escape_times': '.compare',
    'transfer_table': '.compare',
    'FIGURES': '.figures',
    'fig_escape_time': '.figures',
    'fig_overlay': '.figures',
    'fig_softmax_vs_linear': '.figures',
    'fig_svag': '.figures',
    'fig_transfer': '.figures',
    'fig_l1_vs_sgd': '.l1',
    'figures': None,
    'l1': None,
    'compare': None,  # the module (its function is compare.compare: the row's slot)
})
