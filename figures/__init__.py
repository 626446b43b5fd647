"""tdyn.figures — theory/practice overlays, agreement metrics, each paper's figures, the tdyn CLI.

The re-exports below load on first use, so that the paper table (:mod:`figures.papers`) and a
paper's row import no matplotlib."""

from ._lazy import lazy_exports

__all__ = ["agreement", "rel_l2", "band", "band_coverage", "overlay", "save_figure"]

__getattr__, __dir__ = lazy_exports(__name__, {name: ".core" for name in __all__})
