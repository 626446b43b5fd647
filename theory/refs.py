"""``resolve_ref("module:attribute")``: the one way tdyn names code by a string.

Used wherever a callable must be named before it is imported or in another process: the paper
table's slots (:mod:`figures.papers`; resolved on first use, so ``tdyn derive`` never imports
torch), the sweep runner's cell functions (``empirical/sweeps.py``; importable in every worker),
``simulate``'s ODE method tables (the solver classes). It lives at the bottom layer so that every
layer may use it.
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import ConfigError

__all__ = ["resolve_ref"]


def resolve_ref(ref: Any) -> Any:
    """The object ``ref`` names: ``"package.module:attribute"`` (the attribute may be dotted,
    ``"module:Class.method"``) is imported and looked up; anything that is not a string (a callable
    or a class given directly) is returned as it is. A string without ``":"`` is a
    :class:`ConfigError`; a missing module or attribute raises ``ImportError``/``AttributeError``."""
    if not isinstance(ref, str):
        return ref
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ConfigError("ref", f"expected 'module:attribute', got {ref!r}")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
