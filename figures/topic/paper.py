"""topic's row of the paper table (registered through the ``tdyn.papers`` entry point in
pyproject.toml; references resolved on first use, so reading the row imports no torch or matplotlib)."""

from figures.papers import Paper

PAPER = Paper(
    name="topic",
    title="Topic structure (LDA): masked-LM two-stage dynamics",
    spec="docs/papers/topic.md",
    config="theory.topic:TopicConfig",
    systems="theory.topic:systems",
    problem="theory.topic:problem",
    sde="theory.topic.sde:sde",  # stage 1 in the full (W, b) space, noise from one document's loss
    train="empirical.topic:run",
    compare="figures.topic.compare:compare",
    figures="figures.topic.figures:FIGURES",
    estimate="theory.topic.config:estimate",
    text="empirical.topic.text:TopicTextConfig",  # LDA topics and embedding/attention ratios on WikiText-2
    claims="figures.topic.claims:claims",
    quick_seconds=210,
)
