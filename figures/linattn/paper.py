"""linattn's row of the paper table (registered through the ``tdyn.papers`` entry point in
pyproject.toml, as every paper's; references resolved on first use)."""

from figures.papers import Paper

from . import ROW

PAPER = Paper(**ROW)
