"""On-disk cache for derived systems and ``tdyn derive`` output, keyed by a hash of the theory source.

Derivations (sympy differentiation, simplification, LaTeX printing) take seconds to tens of
seconds; their results only change when the code under ``theory/`` (or sympy) changes. Entries
are keyed by ``sha256(theory/*.py sources, sympy version, the caller's key)``, so any edit to the
theory invalidates every entry.

Where: ``$TDYN_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/tdyn`` or ``~/.cache/tdyn`` — never
inside the repository. Each entry is one JSON file ``{"sha256": ..., "payload": ...}`` written
atomically; an entry that does not parse or whose checksum does not match is rebuilt, never
trusted. Set ``TDYN_NO_CACHE=1`` (or pass ``use_cache=False``) to bypass the cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "source_hash", "function_digest", "cached_json", "cached_systems", "cache_enabled"]

THEORY_DIR = Path(__file__).resolve().parent


def cache_dir() -> Path:
    """``$TDYN_CACHE_DIR``, else ``$XDG_CACHE_HOME/tdyn``, else ``~/.cache/tdyn``."""
    env = os.environ.get("TDYN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tdyn"


def cache_enabled() -> bool:
    return os.environ.get("TDYN_NO_CACHE", "") in ("", "0")


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
    import sympy

    h = hashlib.sha256(f"sympy {sympy.__version__}\n".encode())
    for path in sorted(THEORY_DIR.rglob("*.py")):
        h.update(str(path.relative_to(THEORY_DIR)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def source_hash(*key: Any) -> str:
    """sha256 of the theory sources, the sympy version and ``key`` (JSON-serialisable)."""
    extra = json.dumps(key, sort_keys=True, default=str)
    return hashlib.sha256(f"{_source_digest()}\n{extra}".encode()).hexdigest()


def function_digest(fn: Callable) -> str:
    """sha256 of the file defining ``fn`` (its module, qualified name and source bytes), so a
    function defined outside ``theory/`` (e.g. a paper registered by a test) keys its own entries."""
    import inspect

    fn = getattr(fn, "uncached", fn)
    h = hashlib.sha256(f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', repr(fn))}".encode())
    try:
        h.update(Path(inspect.getsourcefile(fn)).read_bytes())
    except (TypeError, OSError):
        h.update(repr(fn).encode())
    return h.hexdigest()


def _checksum(payload: Any) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _read(path: Path) -> Any:
    """The payload of a valid entry, else ``None`` (missing, unreadable, bad checksum)."""
    try:
        doc = json.loads(path.read_text())
        if _checksum(doc["payload"]) == doc["sha256"]:
            return doc["payload"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _write(path: Path, payload: Any) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"sha256": _checksum(payload), "payload": payload}, f)
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache dir only costs speed
        pass


def cached_json(namespace: str, key: Any, build: Callable[[], Any], *, use_cache: bool = True,
                validate: Callable[[Any], Any] | None = None) -> Any:
    """``build()`` (a JSON-serialisable value), cached under ``namespace`` and ``key``.

    ``validate(payload)`` may turn the payload into the returned object; if it raises, the entry
    is rebuilt."""
    if not (use_cache and cache_enabled()):
        value = build()
        return validate(value) if validate else value
    path = cache_dir() / namespace / f"{source_hash(namespace, key)}.json"
    payload = _read(path)
    if payload is not None:
        try:
            return validate(payload) if validate else payload
        except Exception:  # noqa: BLE001 — a bad entry is rebuilt, whatever is wrong with it
            pass
    payload = build()
    _write(path, payload)
    return validate(payload) if validate else payload


def cached_systems(fn: Callable) -> Callable:
    """Decorator for a paper's ``systems(config=None) -> list[ReducedSystem]``: the systems are
    stored with :func:`theory.export.to_json` and read back with :func:`theory.load_system`.
    ``fn(config, use_cache=False)`` bypasses the cache."""

    @functools.wraps(fn)
    def wrapper(config=None, *, use_cache: bool = True):
        from .export import to_json
        from .load import load_system

        cfg = config.to_dict() if hasattr(config, "to_dict") else config
        key = (function_digest(fn), cfg)
        fresh: list = []

        def build():
            fresh.extend(fn(config))
            return [to_json(s) for s in fresh]

        def load(payload):
            return fresh if fresh else [load_system(d) for d in payload]

        return cached_json("systems", key, build, use_cache=use_cache, validate=load)

    wrapper.uncached = fn
    return wrapper
