"""Topic figures and the theory-vs-practice comparison (docs/papers/topic.md §3-§6).

* :mod:`.compare` — :func:`compare` (the paper row's ``compare`` slot): the stage-1 run against
  the derived ODE, the joint two-stage run, the paper's attention table; where agreement breaks
  (:class:`~figures.report.Break` rows);
* :mod:`.claims` — the paper's claims (``claims.toml``, decided over seeds with validity maps) and
  the functions the registry names;
* :mod:`.figures` — :data:`FIGURES` (the row's ``figures`` slot);
* :mod:`.text` — the real-text figure and claims (WikiText-2 topic ratios).

Direction: ``figures`` may import ``compare`` and ``claims``; ``compare`` never imports ``figures``.
"""

from .._lazy import lazy_exports

__all__ = ["compare", "stage1_comparison", "two_stage_run", "predicted_onset", "attention_table", "table_rows",
           "table_onset", "two_stage_check", "gamma_star_grid", "FIGURES", "fig_topic_mode",
           "fig_value_heatmap", "fig_two_stage", "fig_attention_table", "fig_gamma_star", "fig_topic_ratios",
           "TOLERANCE", "TABLE_ROWS", "SEEDS"]

# re-exports load on first use: importing the row (.paper) imports no matplotlib
__getattr__, __dir__ = lazy_exports(__name__, {
    'two_stage_check': '.claims',
    'SEEDS': '.compare',
    'TABLE_ROWS': '.compare',
    'TOLERANCE': '.compare',
    'attention_table': '.compare',
    'predicted_onset': '.compare',
    'stage1_comparison': '.compare',
    'table_onset': '.compare',
    'table_rows': '.compare',
    'two_stage_run': '.compare',
    'FIGURES': '.figures',
    'fig_attention_table': '.figures',
    'fig_gamma_star': '.figures',
    'fig_topic_mode': '.figures',
    'fig_topic_ratios': '.figures',
    'fig_two_stage': '.figures',
    'fig_value_heatmap': '.figures',
    'gamma_star_grid': '.figures',
    'claims': None,
    'figures': None,
    'compare': None,  # the module (its function is compare.compare: the row's slot)
})
