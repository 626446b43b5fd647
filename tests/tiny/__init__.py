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
