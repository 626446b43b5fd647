"""Golden files: reference tables written once on one machine, compared with a tolerance.

A golden CSV ``NAME.csv`` comes with ``NAME.tolerance.json`` (``{"rtol": ..., "atol": ...}``):
floats computed on another machine (another BLAS, CPU, libm) may differ in their last bits, so
numeric columns are compared within that tolerance; every other column exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def tolerance_of(path: Path) -> dict[str, float]:
    """The ``rtol``/``atol`` stored beside the golden file ``path``."""
    tol = json.loads(path.with_name(path.stem + ".tolerance.json").read_text())
    return {"rtol": float(tol["rtol"]), "atol": float(tol["atol"])}


def assert_matches_golden(df: pd.DataFrame, path: Path) -> None:
    """``df`` equals the golden CSV at ``path``: same columns and rows, non-float columns exactly,
    float columns within the tolerance stored beside it."""
    ref = pd.read_csv(path)
    pd.testing.assert_frame_equal(df.reset_index(drop=True), ref, check_exact=False, check_dtype=False,
                                  **tolerance_of(path))
