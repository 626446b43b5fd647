"""Build the API reference from the docstrings into docs/api/ (``make docs``; pdoc, pinned in
constraints.txt). Every module of the four packages gets a page: the packages' ``__all__`` lists
their public names, not their submodules, so the modules are listed here explicitly.

Usage: ``python docs/build_api.py [OUTDIR]`` (default ``docs/api``; not committed)."""

from __future__ import annotations

import importlib
import logging
import pkgutil
import sys
from pathlib import Path

PACKAGES = ("theory", "simulate", "empirical", "figures")


def modules() -> list[str]:
    """Every module and subpackage of the four packages, packages first, without repeats."""
    names = list(PACKAGES)
    for pkg in PACKAGES:
        names += [m.name for m in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + ".")]
    return list(dict.fromkeys(names))


def build(outdir: str | Path = "docs/api") -> Path:
    import pdoc

    logging.getLogger("pdoc").setLevel(logging.ERROR)  # a module reached twice (package + list) is fine
    out = Path(outdir)
    pdoc.pdoc(*modules(), output_directory=out)
    return out / "index.html"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    print(f"wrote {build(sys.argv[1] if len(sys.argv) > 1 else 'docs/api')}")
