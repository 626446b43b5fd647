"""Package re-exports that load on first use (PEP 562), so that importing a light module of a
package (``figures.papers``, a paper's ``figures.<p>.paper`` row) does not import matplotlib, torch
or jax through the package's ``__init__``.

``__getattr__, __dir__ = lazy_exports(__name__, {"compare": ".compare", "FIGURES": ".figures"})``
in a package's ``__init__`` makes ``package.compare`` import ``.compare`` (and take its attribute
``compare``) when first read; a name mapped to ``None`` is the submodule itself.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str | None]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps each public name to the relative
    submodule defining it (``".compare"``), or to ``None`` for a submodule of that name."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        source = exports[name]
        if source is None:
            value = importlib.import_module(f".{name}", package)
        else:
            value = getattr(importlib.import_module(source, package), name)
        setattr(sys.modules[package], name, value)  # resolved once
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
