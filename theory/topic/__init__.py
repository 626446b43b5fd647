"""Topic structure in a one-layer transformer (Li, Li, Risteski, ICML 2023; spec ``docs/papers/topic.md``).

Everything is derived from the masked-LM objective; the spec's printed equations are only checked
against the derivation in ``tests/theory/topic/``. Modules, by concern:

* :mod:`.config` — ``PAPER``, ``SPEC``, :class:`TopicConfig` (all variants' settings; **time: ODE
  time = optimiser step, with ``eta = lr`` in the flow**) and the size ``estimate``;
* :mod:`.derive` — stage 1 (spec §3.5) and the embedding version, in sympy;
* :mod:`.population` — full-vocabulary population quantities (numpy or jax via ``xp=``);
* :mod:`.problem` — parameter values, ``systems(config)``, ``problem(config)`` and the two-stage
  problem (the paper-table hooks);
* :mod:`.stage2` — a separate job beside stage 1: the attention stage (spec §3.6), its own derived
  system (tied-logit flow), the numerical ``gamma*``, the escape rate and the two-stage system.

* :mod:`.sde` — the minibatch SDE of stage 1 in the full ``(W, b)`` space (the row's ``sde``
  slot), its noise derived from one document's loss (:func:`.derive.document_loss`,
  :func:`.derive.full_space_system`); imported on its own (``theory.topic.sde``).

Float64 throughout.
"""

from .config import KEY_VARIANTS, PAPER, SPEC, VARIANTS, Config, TopicConfig
from .derive import (FULL_PARAMETERS, FULL_SYMBOLIC_MAX_D, STAGE1_PARAMETERS, STAGE1_STATE, A, B, C, T, b_M, b_w,
                     chain_rule, context_frequencies, document_distribution, document_loss, e_2, eigen_coordinates,
                     embedding_system, embedding_topic_mode, eta, full_space_symbols, full_space_system,
                     headline_block_difference, kappa, lam, m, multiplicities, n_sel, numeric_subs, omega_1, omega_2,
                     omega_3, p_c, p_m, p_r, r, s, stage1_definitions, stage1_flow, stage1_loss, stage1_optimum,
                     stage1_system, t_sym, tau, topic_mode_equation, topic_mode_solution, v)
from .population import (context_basis, context_residual, context_vector, document_table, full_value_matrix,
                         gamma_from, off_symmetric_residual, reduced_coordinates, stage2_loss, tied_logits,
                         word_topics)
from .stage2 import (STAGE2_STATE, STAGE2_TYING, STAGE2_VALUE, attention_dim, escape_rate,
                     escape_rate_polynomial, logit_multiplicities, predicted_onset, s1, s2, s3, s_Mw, s_MM,
                     s_wM, stage2_optimum, stage2_system, stage2_tied_loss, two_stage_system, value_optimum)
from .problem import (SOLVE_OPTIONS, problem, stage2_parameters, system_parameters, systems, two_stage_parameters,
                      two_stage_problem)

__all__ = [
    # config
    "PAPER", "SPEC", "KEY_VARIANTS", "VARIANTS", "TopicConfig", "Config",
    # symbols
    "T", "v", "tau", "p_m", "p_c", "p_r", "lam", "eta", "A", "B", "C", "m", "r", "s", "b_w", "b_M",
    "omega_1", "omega_2", "omega_3", "e_2", "t_sym", "s1", "s2", "s3", "s_Mw", "s_wM", "s_MM",
    "STAGE1_STATE", "STAGE1_PARAMETERS", "STAGE2_STATE", "STAGE2_VALUE", "STAGE2_TYING",
    # stage 1 and embedding (derive)
    "chain_rule", "context_frequencies", "stage1_definitions", "stage1_loss", "multiplicities", "stage1_flow",
    "stage1_system", "eigen_coordinates", "topic_mode_equation", "topic_mode_solution",
    "headline_block_difference", "kappa", "numeric_subs", "stage1_optimum", "embedding_topic_mode",
    "embedding_system", "n_sel", "FULL_PARAMETERS", "FULL_SYMBOLIC_MAX_D", "full_space_symbols", "document_loss",
    "document_distribution", "full_space_system",
    # population
    "word_topics", "full_value_matrix", "reduced_coordinates", "off_symmetric_residual", "context_basis",
    "context_residual", "context_vector",
    "document_table", "stage2_loss", "tied_logits", "gamma_from",
    # stage 2
    "stage2_tied_loss", "logit_multiplicities", "stage2_system", "stage2_optimum", "value_optimum", "escape_rate",
    "attention_dim", "predicted_onset", "escape_rate_polynomial", "two_stage_system",
    # paper-table hooks
    "SOLVE_OPTIONS", "system_parameters", "stage2_parameters", "two_stage_parameters", "systems", "problem",
    "two_stage_problem",
]
