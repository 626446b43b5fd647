"""tdyn.figures — theory/practice overlays, agreement metrics, each paper's figures, the tdyn CLI."""

from .core import agreement, band, band_coverage, overlay, rel_l2, save_figure

__all__ = ["agreement", "rel_l2", "band", "band_coverage", "overlay", "save_figure"]
