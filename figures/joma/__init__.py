"""JoMA figures and the theory-vs-practice comparison (docs/papers/joma.md §2, §3, §5).

* :mod:`.compare` — the measurements and :func:`compare` (the paper row's ``compare`` slot);
* :mod:`.claims` — the headline claims (``claims.toml``), decided over seeds with validity maps:
  ``figures.joma.claims:claims`` (the row's ``claims`` slot; the module, not re-exported here) and the
  statistics, regimes and theories the registry names;
* :mod:`.figures` — the figure functions and :data:`FIGURES` (the row's ``figures`` slot);
* :mod:`.text` — the WikiText figures and claims (Figs. 6 and 8).
"""

from .compare import (A1_WINDOW, HEADLINE_TOLERANCE, block_flow_ode, break_time, compare, derivation_check, half_times,
                      headline, headline_breaks, learning_order)
from .figures import (FIGURES, fig2_invariant, fig3_component_growth, fig4_nonlinear, fig_block_overlay, fig_headline,
                      fig_layers_and_table1, fig_learning_order, fig_theorem2, where_agreement_breaks)
from .text import fig_joma_entropy, fig_joma_lr_sweep, fig_wikitext, text_claim_results

__all__ = [
    "compare", "headline", "block_flow_ode", "derivation_check", "learning_order", "half_times", "break_time",
    "headline_breaks", "A1_WINDOW", "HEADLINE_TOLERANCE",
    "FIGURES", "fig2_invariant", "fig3_component_growth", "fig4_nonlinear", "fig_theorem2", "fig_block_overlay",
    "fig_headline", "where_agreement_breaks", "fig_learning_order", "fig_layers_and_table1",
    "fig_joma_entropy", "fig_joma_lr_sweep", "fig_wikitext", "text_claim_results",
]
