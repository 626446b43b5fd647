"""SCB's row of the paper table (registered through the ``tdyn.papers`` entry point in
pyproject.toml; references resolved on first use, so reading the row imports no torch or matplotlib)."""

from figures.papers import Paper

PAPER = Paper(
    name="scb",
    title="Sparse contextual bigrams: linear transformer, preconditioned l1-proximal SGD, two stages",
    spec="docs/papers/scb.md",
    config="theory.scb:SCBConfig",
    systems="theory.scb:systems",
    problem="theory.scb:problem",
    sde="theory.scb:minibatch_sde_reduced",  # docs/papers/scb.md §3.6: reduced state + off-manifold energies
    train="empirical.scb:run",
    train_seeds="empirical.scb.l1:train_seeds",
    compare="figures.scb.compare:compare",
    figures="figures.scb.figures:FIGURES",
    estimate="theory.scb.config:estimate",
    claims="figures.scb.claims:claims",
    quick_seconds=136,
    missing={"text": "the SCB paper's claims are about synthetic sparse contextual bigrams: no real-text protocol"},
)
