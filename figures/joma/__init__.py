"""JoMA figures and the theory-vs-practice comparison (docs/papers/joma.md §2, §3, §5).

* :mod:`.compare` — the measurements and :func:`compare` (the paper row's ``compare`` slot);
* :mod:`.claims` — the headline claims (``claims.toml``), decided over seeds with validity maps:
  ``figures.joma.claims:claims`` (the row's ``claims`` slot; the module, not re-exported here) and the
  statistics, regimes and theories the registry names;
* :mod:`.figures` — the figure functions and :data:`FIGURES` (the row's ``figures`` slot);
* :mod:`.text` — the WikiText figures and claims (Figs. 6 and 8).
"""

from .._lazy import lazy_exports

__all__ = [
    "compare", "headline", "block_flow_ode", "derivation_check", "learning_order", "half_times", "break_time",
    "headline_breaks", "A1_WINDOW", "HEADLINE_TOLERANCE",
    "FIGURES", "fig2_invariant", "fig3_component_growth", "fig4_nonlinear", "fig_theorem2", "fig_block_overlay",
    "fig_headline", "where_agreement_breaks", "fig_learning_order", "fig_layers_and_table1",
    "fig_joma_entropy", "fig_joma_lr_sweep", "fig_wikitext", "text_claim_results",
]

# re-exports load on first use: importing the row (.paper) imports no matplotlib
__getattr__, __dir__ = lazy_exports(__name__, {
    'A1_WINDOW': '.compare',
    'HEADLINE_TOLERANCE': '.compare',
    'block_flow_ode': '.compare',
    'break_time': '.compare',
    'compare': '.compare',
    'derivation_check': '.compare',
    'half_times': '.compare',
    'headline': '.compare',
    'headline_breaks': '.compare',
    'learning_order': '.compare',
    'FIGURES': '.figures',
    'fig2_invariant': '.figures',
    'fig3_component_growth': '.figures',
    'fig4_nonlinear': '.figures',
    'fig_block_overlay': '.figures',
    'fig_headline': '.figures',
    'fig_layers_and_table1': '.figures',
    'fig_learning_order': '.figures',
    'fig_theorem2': '.figures',
    'where_agreement_breaks': '.figures',
    'fig_joma_entropy': '.text',
    'fig_joma_lr_sweep': '.text',
    'fig_wikitext': '.text',
    'text_claim_results': '.text',
    'figures': None,
    'text': None,
})
