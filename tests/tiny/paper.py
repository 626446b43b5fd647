"""The tiny paper's row, registered through the ``tdyn.papers`` entry point of its own
``pyproject.toml`` when the package is installed (``pip install tests/tiny``), as any plugin's."""

from figures.papers import Paper

from . import ROW

PAPER = Paper(**ROW)
