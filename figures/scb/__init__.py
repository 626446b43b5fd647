"""SCB figures and the theory-vs-practice comparison (papers/scb.md §3.4, §4, §5, §6).

:func:`compare` (the paper table's ``compare`` slot) returns a :class:`~figures.report.Report`;
:func:`make_figures` (the ``figures`` slot) writes every figure. See :mod:`.compare` and
:mod:`.figures`.
"""

from .compare import (
    BAND_TOL,
    ESCAPE_TOL,
    SGD_ESCAPE_TOL,
    TOLERANCE,
    TRANSFER_RATIO,
    agreement_breakdown,
    band_claim,
    compare,
    escape_time_claim,
    transfer_claim,
)
from .l1 import fig_l1_vs_sgd, l1_claims, l1_study
from .figures import (
    BAND_LEVELS,
    escape_formula_value,
    fig_escape_time,
    fig_overlay,
    fig_softmax_vs_linear,
    fig_transfer,
    make_figures,
    ode_for,
    spec_escape_times,
)

__all__ = [
    "compare", "agreement_breakdown", "escape_time_claim", "transfer_claim", "band_claim",
    "make_figures", "fig_overlay", "fig_l1_vs_sgd", "l1_claims", "l1_study", "fig_escape_time", "fig_transfer",
    "fig_softmax_vs_linear", "ode_for", "escape_formula_value", "spec_escape_times",
    "TOLERANCE", "ESCAPE_TOL", "SGD_ESCAPE_TOL", "BAND_TOL", "TRANSFER_RATIO", "BAND_LEVELS",
]
