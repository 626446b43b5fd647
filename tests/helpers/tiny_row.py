"""The tiny paper (tests/tiny_paper.py) registered as a row of the paper table, for a test's duration."""

from contextlib import contextmanager

import tiny_paper
from figures.papers import PAPERS, Paper, register


@contextmanager
def tiny_registered(**slots):
    """Register the tiny paper (with its claims slot; ``slots`` override any slot) and remove it after."""
    fields = dict(name="tiny", title="1-D logistic flow", spec="tests/tiny_paper.py", config=tiny_paper.TinyConfig,
                  systems=tiny_paper.systems, problem=tiny_paper.problem, train=tiny_paper.train,
                  compare=tiny_paper.compare, figures=tiny_paper.figures, claims=tiny_paper.claims, sde=None,
                  missing={"sde": "no minibatch SDE for the tiny paper",
                           "estimate": "one logit: nothing to size beyond the generic rules",
                           "text": "no real-text protocol"})
    row = register(Paper(**{**fields, **slots}))
    try:
        yield row
    finally:
        PAPERS.pop("tiny", None)
