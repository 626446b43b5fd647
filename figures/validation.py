"""Path and file checks of the CLI's validation pass (nothing is created: a writable directory is
probed with a temporary file that is removed at once)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from theory.errors import ConfigError

__all__ = ["check_path", "check_writable_dir", "check_out", "check_outdir", "read_from"]

#: file-name and path limits (bytes) where the file system does not say (Linux, macOS: 255 / 4096)
NAME_MAX, PATH_MAX = 255, 4096


def _short(name: str) -> str:
    return name if len(name) <= 40 else f"{name[:20]}...{name[-12:]}"


def check_path(field: str, path: str | os.PathLike, *, derived: tuple[str, ...] = ()) -> Path:
    """``path`` if every name in it fits the file system (at most :data:`NAME_MAX` bytes each,
    :data:`PATH_MAX` in all), else ``ConfigError(field, ...)`` — before any work, so that a long
    name never fails after the result was computed. ``derived`` are suffixes of files written
    beside it (``".partial.nc"`` replacing the suffix of ``--out``): their names must fit too.
    Touches nothing but ``os.pathconf`` of the current folder."""
    p = Path(path)
    try:
        name_max = int(os.pathconf(".", "PC_NAME_MAX"))
        path_max = int(os.pathconf(".", "PC_PATH_MAX"))
    except (OSError, ValueError):
        name_max, path_max = NAME_MAX, PATH_MAX
    for part in p.parts:
        n = len(os.fsencode(part))
        if n > name_max:
            raise ConfigError(field, f"the name {_short(part)!r} is {n} bytes; the file system allows {name_max}")
    for suffix in derived:
        extra = p.stem + suffix
        n = len(os.fsencode(extra))
        if n > name_max:
            raise ConfigError(field, f"{_short(p.name)!r} leaves no room for its {suffix} file ({n} bytes, the file "
                                     f"system allows {name_max}); use a name of at most "
                                     f"{name_max - len(os.fsencode(suffix)) + len(os.fsencode(p.suffix))} bytes")
    n = len(os.fsencode(os.path.abspath(p)))
    if n >= path_max:
        raise ConfigError(field, f"the path is {n} bytes; the file system allows {path_max - 1}")
    return p


def check_writable_dir(field: str, d: Path) -> None:
    check_path(field, d)
    if not d.exists():
        raise ConfigError(field, f"directory does not exist: {d}")
    if not d.is_dir():
        raise ConfigError(field, f"not a directory: {d}")
    try:  # a real probe (root ignores permission bits; read-only mounts do not)
        fd, probe = tempfile.mkstemp(prefix=".tdyn-probe.", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(field, f"directory is not writable: {d} ({err.strerror})") from None


def check_out(out: str | None, field: str = "out") -> Path | None:
    """``--out FILE.nc``: a .nc name, not a directory, in an existing writable directory."""
    if out is None:
        return None
    p = Path(out)
    if p.suffix != ".nc":
        raise ConfigError(field, f"expected a .nc file name, got {out!r}")
    check_path(field, p, derived=(".partial.nc",))  # the part kept on an interrupt or a divergence
    if p.is_dir():
        raise ConfigError(field, f"is a directory: {out}")
    check_writable_dir(field, p.parent if str(p.parent) else Path("."))
    return p


def check_outdir(outdir: str | None, field: str = "outdir") -> Path | None:
    """An output folder: an existing writable directory, or a new one under an existing writable one."""
    if outdir is None:
        return None
    p = check_path(field, outdir)
    if p.exists():
        check_writable_dir(field, p)
        return p
    anc = p.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    check_writable_dir(field, anc)
    return p


def read_from(from_file: str) -> tuple[str, dict, dict]:
    """``(paper, config fields, invocation)`` recorded in a trajectory file."""
    import h5py

    p = check_path("from", from_file)
    if not p.is_file():
        raise ConfigError("from", f"no such file: {from_file}")
    try:
        with h5py.File(p, "r") as f:
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            datasets = []  # a damaged file is refused here, not half-way through the run
            f.visititems(lambda name, obj: datasets.append(obj) if isinstance(obj, h5py.Dataset) else None)
            for d in datasets:
                d[()]
    except Exception as err:  # noqa: BLE001 - any reader failure (h5py raises OSError, RuntimeError, ...) is the file's
        why = " ".join(f"{type(err).__name__}: {err}".split())[:200]
        raise ConfigError("from", f"not a readable NetCDF trajectory: {from_file} ({why})") from None
    if "config" not in attrs or "paper" not in attrs:
        raise ConfigError("from", f"{from_file} records no config (written before tdyn recorded provenance)")
    try:
        return str(attrs["paper"]), json.loads(attrs["config"]), json.loads(attrs.get("invocation", "{}"))
    except ValueError as err:
        raise ConfigError("from", f"unreadable config in {from_file}: {err}") from None
