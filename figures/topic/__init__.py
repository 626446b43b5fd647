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

from .claims import two_stage_check
from .compare import (SEEDS, TABLE_ROWS, TOLERANCE, attention_table, compare, predicted_onset, stage1_comparison,
                      table_onset, table_rows, two_stage_run)
from .figures import (FIGURES, fig_attention_table, fig_gamma_star, fig_topic_mode, fig_topic_ratios, fig_two_stage,
                      fig_value_heatmap, gamma_star_grid)

__all__ = ["compare", "stage1_comparison", "two_stage_run", "predicted_onset", "attention_table", "table_rows",
           "table_onset", "two_stage_check", "gamma_star_grid", "FIGURES", "fig_topic_mode",
           "fig_value_heatmap", "fig_two_stage", "fig_attention_table", "fig_gamma_star", "fig_topic_ratios",
           "TOLERANCE", "TABLE_ROWS", "SEEDS"]
