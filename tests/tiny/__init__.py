"""A tiny paper, defined entirely under tests/: the worked example of docs/adding-a-paper.md.

Its three packages have the standard module names — ``tiny.theory`` (config, derive, population,
problem), ``tiny.empirical`` (data, model, update, experiment), ``tiny.figures`` (compare, claims,
figures) — and ``tests/test_adding_a_paper.py`` registers its one row and runs it through the CLI,
touching no core file. A real paper lives at ``theory/<p>/``, ``empirical/<p>/``, ``figures/<p>/``.

Theory: one logit ``a`` fitted by cross-entropy to Bernoulli(p) labels. The loss
``L(a) = -p log sigma(a) - (1-p) log(1 - sigma(a))`` is differentiated by sympy; gradient flow with
learning rate ``lr`` in time = optimiser steps gives ``da/dt = lr (p - sigma(a))``.
Practice: a 1-parameter torch model trained by SGD on sampled labels (or on the exact gradient).
"""

#: the tiny paper's row, exactly as docs/adding-a-paper.md shows it (references resolved on first use;
#: tests register it with ``figures.papers.register(Paper(**ROW))``)
ROW = dict(
    name="tiny", title="1-D logistic flow", spec="tests/tiny/__init__.py",
    config="tiny.theory:TinyConfig", systems="tiny.theory:systems", problem="tiny.theory:problem",
    sde="tiny.theory:sde", train="tiny.empirical.experiment:run", compare="tiny.figures.compare:compare",
    figures="tiny.figures.figures:FIGURES", estimate="tiny.theory.config:estimate", text=None,
    claims="tiny.figures.claims:claims",
    missing={"text": "no real-text protocol"},
)
