"""The tiny paper (tests/tiny/) registered as a row of the paper table, for a test's duration."""

from contextlib import contextmanager

from figures.papers import PAPERS, Paper, register
from tiny import ROW


@contextmanager
def tiny_registered(**slots):
    """Register the tiny paper's row (``tiny.ROW``, claims slot included; ``slots`` override any
    slot) and remove it after."""
    row = register(Paper(**{**ROW, **slots}))
    try:
        yield row
    finally:
        PAPERS.pop("tiny", None)
