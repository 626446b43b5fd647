"""Scan & Snap — training dynamics of a 1-layer transformer (Tian, Wang, Chen, Du, NeurIPS 2023).

Spec: ``docs/papers/scan_snap.md``. Reparameterised model (spec §2.2): decoder ``Y`` (attended token ->
output token) and attention logits ``Z`` (query row, key column); the attended mixture is
l2-normalised in token space; the query does not attend to itself.

Modules (the module set of every paper, plus one for a separate job):

* :mod:`.config` — ``PAPER``, ``SPEC``, :class:`ScanSnapConfig` (every variant's settings; time
  unit ``ode_time``), the official generator's instance (:func:`make_task`), ``estimate``;
* :mod:`.derive` — ``J_inf`` and its gradient-ascent flows by differentiation (full symmetric
  system with the paper's named quantities, general system, Appendix A instance), and the maps
  between these systems' states and the full parameters ``Y``, ``Z``;
* :mod:`.population` — objectives and observables of full parameters (``xp=`` numpy or jax);
* :mod:`.problem` — ``systems(config)`` and ``problem(config)`` for the paper table;
* :mod:`.sde` — the minibatch SDE of finite-T count-vector SGD (the row's ``sde`` slot);
* :mod:`.reduced` — the separate job: the paper's *stated* results that the derived flow is
  checked against — closed forms (h, gamma, Gamma, B, Theorem 4), the reduced attention ODE
  (Lemma 4 / Eqn. 10) and the snap ODE (Theorem 4).
"""

from .config import PAPER, SPEC, Config, ScanSnapConfig, ScanSnapTask, make_task
from .derive import (C_sym, K_sym, Nq_sym, R_sym, SymmetricLayout, chain_rule_flow, embed_symmetric_state,
                     entropy_expr, eta_Y, eta_Z, full_parameters, full_system, general_state_vector, general_system,
                     gradient_ascent_flow, minimal_instance, per_sample_loss, per_sample_system,
                     population_objective, sample_symbols, symmetric_layout, unpack_general_state, z_rows,
                     z_state_names)
from .population import (attention_scores, count_vector_objective, entropy, invariant_spread, mixture, objective,
                         observables_from_parameters, symmetric_y_coordinates)
from .problem import SOLVE_OPTIONS, problem, systems
from .reduced import (B_of_t, B_theorem4, C0_sym, Gamma_of_t, M_sym, chi_bounds, closed_forms, gamma_of_t,
                      h_closed_form, h_discrete, h_sym, reduced_parameters, reduced_system, snap_parameters,
                      snap_system, t_sym, transition_times)

__all__ = [
    "PAPER", "SPEC", "ScanSnapConfig", "Config", "ScanSnapTask", "make_task",
    "population_objective", "gradient_ascent_flow", "chain_rule_flow", "full_system", "full_parameters",
    "general_system", "minimal_instance", "SymmetricLayout", "symmetric_layout", "entropy_expr",
    "eta_Y", "eta_Z", "R_sym", "K_sym", "C_sym", "Nq_sym", "per_sample_loss", "per_sample_system", "sample_symbols",
    "embed_symmetric_state", "general_state_vector", "unpack_general_state", "z_rows", "z_state_names",
    "entropy", "mixture", "objective", "attention_scores", "invariant_spread", "observables_from_parameters",
    "count_vector_objective", "symmetric_y_coordinates",
    "systems", "problem", "SOLVE_OPTIONS",
    "closed_forms", "h_closed_form", "h_discrete", "gamma_of_t", "Gamma_of_t", "B_of_t", "B_theorem4",
    "transition_times", "chi_bounds", "snap_system", "reduced_system", "reduced_parameters", "snap_parameters",
    "t_sym", "M_sym", "C0_sym", "h_sym",
]
