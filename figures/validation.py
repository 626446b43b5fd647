"""Path and file checks of the CLI's validation pass (nothing is created: a writable directory is
probed with a temporary file that is removed at once)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from theory.errors import ConfigError

__all__ = ["check_writable_dir", "check_out", "check_outdir", "read_from"]


def check_writable_dir(field: str, d: Path) -> None:
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
    if p.is_dir():
        raise ConfigError(field, f"is a directory: {out}")
    check_writable_dir(field, p.parent if str(p.parent) else Path("."))
    return p


def check_outdir(outdir: str | None, field: str = "outdir") -> Path | None:
    """An output folder: an existing writable directory, or a new one under an existing writable one."""
    if outdir is None:
        return None
    p = Path(outdir)
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

    p = Path(from_file)
    if not p.is_file():
        raise ConfigError("from", f"no such file: {from_file}")
    try:
        with h5py.File(p, "r") as f:
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    except OSError as err:
        raise ConfigError("from", f"not a NetCDF trajectory: {from_file} ({err})") from None
    if "config" not in attrs or "paper" not in attrs:
        raise ConfigError("from", f"{from_file} records no config (written before tdyn recorded provenance)")
    try:
        return str(attrs["paper"]), json.loads(attrs["config"]), json.loads(attrs.get("invocation", "{}"))
    except ValueError as err:
        raise ConfigError("from", f"unreadable config in {from_file}: {err}") from None
