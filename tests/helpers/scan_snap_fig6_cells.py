"""A Fig. 6 cell that fails once (the interrupted-grid test): with ``$TDYN_FIG6_FLAKY`` set to a
folder, the cell of (num_last, eta_Z) = ``$TDYN_FIG6_FLAKY_CELL`` raises on its first call (a marker
file records the call) and computes normally afterwards."""

import os
from pathlib import Path

from figures.scan_snap.fig6 import fig6_cell


def flaky_cell(paper, config, **options):
    folder, target = os.environ.get("TDYN_FIG6_FLAKY"), os.environ.get("TDYN_FIG6_FLAKY_CELL", "")
    if folder and target == f"{config['num_last']},{config['eta_Z']}":
        marker = Path(folder) / "called"
        if not marker.exists():
            marker.write_text("1")
            raise RuntimeError("interrupted (first call of this cell)")
    return fig6_cell(paper, config, **options)
