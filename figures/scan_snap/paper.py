"""Scan & Snap's row of the paper table (registered through the ``tdyn.papers`` entry point in
pyproject.toml; references resolved on first use, so reading the row imports no torch or matplotlib)."""

from figures.papers import Paper

PAPER = Paper(
    name="scan-snap",
    title="Scan and snap: 1-layer transformer, scan then snap (T = infinity objective)",
    spec="docs/papers/scan_snap.md",
    config="theory.scan_snap:ScanSnapConfig",
    systems="theory.scan_snap:systems",
    problem="theory.scan_snap:problem",
    sde="theory.scan_snap.sde:sde",  # finite-T count-vector SGD on the symmetric subspace
    train="empirical.scan_snap.experiment:run",
    compare="figures.scan_snap.compare:compare",
    figures="figures.scan_snap.figures:FIGURES",
    estimate="theory.scan_snap.config:estimate",
    text="empirical.scan_snap.text:ScanSnapTextConfig",  # Figs. 7 and 10 on WikiText-2
    claims="figures.scan_snap.claims:claims",  # figures/scan_snap/claims.toml, decided over seeds
    quick_seconds=213,
)
