"""Symbols every reduced system shares.

:data:`TIME` is the time symbol of every :class:`~theory.core.ReducedSystem` (closed forms are
functions of it); a leaf module, so that :mod:`theory.core` and :mod:`theory.export` both read it
without importing each other.
"""

from __future__ import annotations

import sympy as sp

__all__ = ["TIME"]

#: The time symbol of every system (closed forms are functions of it).
TIME = sp.Symbol("t", real=True)
