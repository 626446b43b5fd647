"""The tiny paper's comparison: ``compare`` (agreement and the report), ``claims`` (the paper's
claims and the code deciding them), ``figures`` (FIGURES: the figure functions the collector runs).
Direction: figures may import compare and claims; compare never imports figures."""
