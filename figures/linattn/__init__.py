"""linattn figures and the theory-vs-practice comparison (docs/papers/linattn.md §3-§5).

* :mod:`.compare` — :func:`compare` (the row's ``compare`` slot) and the data the report and figures share;
* :mod:`.claims` — the claims and the code deciding them;
* :mod:`.figures` — :data:`FIGURES` (the row's ``figures`` slot).

:data:`ROW` is the paper's row, registered by :mod:`.paper` through the ``tdyn.papers`` entry point.
Direction: figures -> compare -> claims.
"""

#: the paper's row (references resolved on first use)
ROW = dict(
    name="linattn", title="Training Dynamics of In-Context Learning in Linear Attention (Zhang et al., ICML 2025)",
    spec="docs/papers/linattn.md",
    config="theory.linattn:LinAttnConfig", systems="theory.linattn:systems", problem="theory.linattn:problem",
    sde=None, train="empirical.linattn.experiment:run", compare="figures.linattn.compare:compare",
    figures="figures.linattn.figures:FIGURES", estimate="theory.linattn.config:estimate", text=None, claims=None,
    quick_seconds=18,
    missing={"sde": "not derived yet: the per-sample loss's noise (spec §3) is future work",
             "text": "in-context linear regression is synthetic: no real-text protocol",
             "claims": "the claims registry (claims.toml) is a draft; compare decides single-run claims"},
)
