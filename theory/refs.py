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


def resolve_ref(ref: Any, field: str | None = None) -> Any:
    """The object ``ref`` names: ``"package.module:attribute"`` (the attribute may be dotted,
    ``"module:Class.method"``) is imported and looked up; anything that is not a string (a callable
    or a class given directly) is returned as it is. A string without ``":"`` is a
    :class:`ConfigError` (of ``field``, default ``"ref"``). A missing module or attribute raises
    ``ImportError``/``AttributeError`` — or, where the reference came from the user's input and
    ``field`` names it (a registry key, a JSON document), ``ConfigError(field, "cannot resolve ...")``."""
    if not isinstance(ref, str):
        return ref
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(field or "ref", f"expected 'module:attribute', got {ref!r}")
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as err:
        if field is None:
            raise
        raise ConfigError(field, f"cannot resolve {ref!r}: {err}") from None
    return obj
