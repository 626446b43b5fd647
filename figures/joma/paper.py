"""JoMA's row of the paper table (registered through the ``tdyn.papers`` entry point in
pyproject.toml; references resolved on first use, so reading the row imports no torch or matplotlib)."""

from figures.papers import Paper

PAPER = Paper(
    name="joma",
    title="JoMA: joint MLP/attention dynamics, invariants, entropy drop and bounce, hierarchy",
    spec="docs/papers/joma.md",
    config="theory.joma:JomaConfig",
    systems="theory.joma:systems",
    problem="theory.joma:problem",
    sde="theory.joma:minibatch_sde",
    train="empirical.joma:run",
    compare="figures.joma.compare:compare",
    figures="figures.joma.figures:FIGURES",
    estimate="theory.joma.config:estimate",
    text="empirical.joma.text:JomaTextConfig",  # Figs. 6 and 8 on WikiText-2
    claims="figures.joma.claims:claims",
    quick_seconds=260,
)
