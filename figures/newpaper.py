"""``tdyn new-paper NAME``: write a working plugin package for a new paper from the template.

The template (``figures/template/``, package data) is a complete paper — a 1-D logistic flow derived
by sympy, a one-logit torch model, a comparison, a figure and a claims registry — laid out with
tdyn's module names, with a ``pyproject.toml`` whose ``tdyn.papers`` entry point registers its row
and tests that hold it to the paper contract (:mod:`figures.contract`). As written it installs
(``pip install -e NAME``) and passes ``tdyn derive|figures NAME`` and its own tests; the author then
replaces its pieces (``docs/adding-a-paper.md``).

Files are ``*.tmpl`` with three fields: ``{{name}}`` (the paper's name, e.g. ``my-paper``),
``{{module}}`` (its Python name, ``my_paper``) and ``{{Class}}`` (``MyPaper``); a path part
``__module__`` becomes the module name and ``package`` the package folder.
"""

from __future__ import annotations

import keyword
import re
import shutil
import sys
import tempfile
from pathlib import Path

from theory.errors import ConfigError

__all__ = ["TEMPLATE", "write_paper", "check_name"]

#: the template folder (shipped as package data)
TEMPLATE = Path(__file__).with_name("template")
#: the names a plugin's module must not shadow (tdyn's own top-level packages)
RESERVED = ("theory", "simulate", "empirical", "figures", "tests")
_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")


def check_name(name: str) -> str:
    """The module name of paper ``name`` (``my-paper`` -> ``my_paper``); ``ConfigError('name', ...)``
    for a name that is not lower-case words joined by hyphens, or whose module would shadow a keyword,
    tdyn's packages, an importable module or a paper already in the table."""
    from .papers import PAPERS

    if not _NAME.fullmatch(name):
        raise ConfigError("name", f"{name!r} must be lower-case letters and digits, words joined by '-' "
                                  "(e.g. my-paper)")
    module = name.replace("-", "_")
    if keyword.iskeyword(module) or module in RESERVED or module in sys.stdlib_module_names:
        raise ConfigError("name", f"{name!r}: its module {module!r} would shadow a Python or tdyn name")
    if name in PAPERS:
        raise ConfigError("name", f"a paper {name!r} is already in the table")
    return module


def _render(text: str, fields: dict[str, str]) -> str:
    for key, value in fields.items():
        text = text.replace("{{" + key + "}}", value)
    return text


def write_paper(name: str, directory: str | Path = ".") -> Path:
    """Write the package for paper ``name`` into ``directory/name`` and return that folder.

    The folder must not exist (``ConfigError('dir', ...)``); the package is written into a temporary
    folder beside it and renamed, so an interrupted call leaves nothing half-written."""
    module = check_name(name)
    parent = Path(directory)
    if not parent.is_dir():
        raise ConfigError("dir", f"{parent} is not a directory")
    target = parent / name
    if target.exists():
        raise ConfigError("dir", f"{target} already exists; choose another --dir or name")
    fields = {"name": name, "module": module, "Class": "".join(w.capitalize() for w in module.split("_"))}
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=parent))
    try:
        for src in sorted(TEMPLATE.rglob("*.tmpl")):
            rel = src.relative_to(TEMPLATE).with_suffix("")  # drop .tmpl
            parts = [module if p == "package" else p.replace("__module__", module) for p in rel.parts]
            dst = staging.joinpath(*parts)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(_render(src.read_text(), fields))
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
