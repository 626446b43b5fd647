"""JoMA — joint MLP/attention dynamics of one Transformer block (Tian et al., ICLR 2024).

Spec: ``docs/papers/joma.md``. Split by concern:

* :mod:`.derive` — the sympy derivation (per-sample objective -> block flow, Theorem 1
  invariants, integrated-out dynamics, Theorem 2, the nonlinear ODEs, HBLT co-occurrence);
* :mod:`.config` — :class:`JomaConfig`: every variant's settings (``VARIANTS``, ``VARIANT_DEFAULTS``,
  ``VARIANT_ONLY``), the presets (``PRESETS``) and the time unit ``t = lr*step``;
* :mod:`.population` — data, the block flow as one ``xp=`` array formula, entropies, closed-form
  times, correlations;
* :mod:`.sde` — minibatch noise as an SDE (this project's extension);
* :mod:`.problem` — ``systems(config)`` and ``problem(config)`` for the paper table, and
  ``block_flow_problem`` (the block ODE of a data set of any size, for :func:`simulate.solve`).
"""

from .config import ACTIVATIONS, ATTENTIONS, FIG4_MU, PAPER, SPEC, Config, JomaConfig
from .derive import (attention_output, block_system, cooccurrence_formula, integrated_system, invariant_expressions,
                     nonlinear_exp_system, nonlinear_softmax_system, per_sample_flow, per_sample_loss,
                     per_sample_objective, rows_distribution,
                     softmax_invariant_residual, state_names, t_sym, tau, theorem2_closed_form, theorem2_system)
from .population import (block_flow, block_initial_state, block_parameters, blow_up_times, centred_gradient,
                         class_distributions, convergence_time, cooccurrence_probability, drops_then_bounces, entropy,
                         fixed_point_entropy, hblt_leaf_lca_heights, initial_parameters, make_data, mixture_data,
                         normalised_correlation, position_attention_entropy, slope_sign_changes, softmax_zhat,
                         stable_rank)
from .problem import SOLVE_OPTIONS, BlockFlowSystem, block_flow_problem, block_flow_system, problem, systems
from .sde import minibatch_sde, sde_model

__all__ = [
    "PAPER", "SPEC", "ATTENTIONS", "ACTIVATIONS", "FIG4_MU",
    "JomaConfig", "Config",
    "t_sym", "tau", "state_names", "attention_output", "per_sample_objective", "per_sample_flow",
    "per_sample_loss", "rows_distribution",
    "invariant_expressions", "block_system", "softmax_invariant_residual", "integrated_system",
    "theorem2_system", "theorem2_closed_form", "nonlinear_exp_system", "nonlinear_softmax_system",
    "cooccurrence_formula",
    "class_distributions", "make_data", "mixture_data", "centred_gradient", "initial_parameters",
    "block_parameters", "block_initial_state", "block_flow", "softmax_zhat", "position_attention_entropy",
    "blow_up_times",
    "convergence_time", "entropy", "fixed_point_entropy", "stable_rank", "slope_sign_changes",
    "drops_then_bounces", "normalised_correlation", "cooccurrence_probability", "hblt_leaf_lca_heights",
    "minibatch_sde", "sde_model", "systems", "problem", "block_flow_problem",
    "block_flow_system", "BlockFlowSystem", "SOLVE_OPTIONS",
]
