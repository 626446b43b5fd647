"""The configuration base every paper's Config derives from.

A Config is a frozen dataclass, validated at construction (an invalid config never exists), that
owns *all* the settings of its paper's variants and the paper's **time convention**:

* :meth:`ParamsBase.log_steps` — the optimiser steps at which training logs observables
  (``0, log_every, 2 log_every, ..., steps``; the last step always);
* :meth:`ParamsBase.ode_time` — the reduced system's time of an optimiser step (each paper states
  its unit and reason in its config's docstring);
* :meth:`ParamsBase.ode_times` — ``[ode_time(s) for s in log_steps()]``: the theory is solved on
  exactly the grid the Trainer logs on.

and the paper's **variants and presets**, one mechanism each:

* **Variants** — a config with a ``variant`` field declares, at class level, ``VARIANTS`` (name ->
  one line), ``VARIANT_ONLY`` (field -> the variants that read it; a field not listed is read by
  every variant), ``VARIANT_DEFAULTS`` (variant -> {field: default}; ``"*"`` for all variants:
  fields whose dataclass default is ``None`` take their value from here; a callable default
  ``config -> value`` is derived from the other resolved fields, e.g. ``N = K``) and ``VARIANT_FIXED``
  (variant -> {field: value} the variant imposes). One generic check at construction: a setting
  the variant ignores, moved from its default, or a fixed field set to another value, is a
  :class:`ConfigError` — no override is silently dropped.
* **Presets** — ``PRESETS`` (name -> :class:`Preset`): the paper's regime, the compare regime,
  the overlay... each with its quick and full settings; :meth:`ParamsBase.preset` builds one.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from .errors import ConfigError

__all__ = ["ParamsBase", "Preset", "log_steps", "check_field_types", "is_seed", "SEED_MAX", "ALL_VARIANTS"]

#: key of ``VARIANT_DEFAULTS`` / ``VARIANT_FIXED`` that applies to every variant
ALL_VARIANTS = "*"


@dataclass(frozen=True)
class Preset:
    """A named setting of a paper's Config: ``quick`` and ``full`` field values (mappings, or
    callables ``cls -> mapping`` when a value is computed), applied over the defaults by
    :meth:`ParamsBase.preset`. ``doc``: one line (what the preset is for, the paper's section)."""

    doc: str
    quick: Mapping[str, Any] | Callable[[type], Mapping[str, Any]] = field(default_factory=dict)
    full: Mapping[str, Any] | Callable[[type], Mapping[str, Any]] | None = None  # None: same as quick

    def settings(self, cls: type, quick: bool) -> dict[str, Any]:
        chosen = self.quick if (quick or self.full is None) else self.full
        return dict(chosen(cls) if callable(chosen) else chosen)


def log_steps(steps: int, log_every: int) -> np.ndarray:
    """``0, log_every, 2*log_every, ...`` plus ``steps`` itself (int64, strictly increasing)."""
    if steps < 1:
        raise ConfigError("steps", f"must be >= 1, got {steps}")
    if log_every < 1:
        raise ConfigError("log_every", f"must be >= 1, got {log_every}")
    grid = np.arange(0, steps + 1, log_every, dtype=np.int64)
    return grid if grid[-1] == steps else np.append(grid, np.int64(steps))


@dataclass(frozen=True)
class ParamsBase:
    """Base for a paper's frozen configuration dataclass.

    Subclasses implement :meth:`validate` (raise :class:`ConfigError` naming the field) and
    :meth:`ode_time`; configs with ``steps`` and ``log_every`` fields get :meth:`log_steps` for free.
    :meth:`with_overrides` parses the CLI's ``--set key=value`` strings into typed fields.
    """

    #: variant name -> one line; empty: the config has no variants
    VARIANTS: ClassVar[Mapping[str, str]] = {}
    #: field -> the variants that read it (fields not listed are read by every variant)
    VARIANT_ONLY: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: variant (or ``"*"``) -> {field: default} for fields declared with default ``None``
    VARIANT_DEFAULTS: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    #: variant (or ``"*"``) -> {field: value} the variant imposes (another value: ConfigError)
    VARIANT_FIXED: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    #: preset name -> :class:`Preset` (see :meth:`preset`)
    PRESETS: ClassVar[Mapping[str, Preset]] = {}

    def __post_init__(self):
        if self.VARIANTS:
            self._resolve_variant()
        check_field_types(self)
        self.validate()
        if self.VARIANTS:
            self._check_variant_settings()

    # -- variants: one mechanism ---------------------------------------------------------------
    def _resolve_variant(self) -> None:
        variant = getattr(self, "variant", None)
        if variant not in self.VARIANTS:
            raise ConfigError("variant", f"must be one of {', '.join(self.VARIANTS)}, got {variant!r}")
        explicit = set(getattr(self, "_explicit", ()))
        defaults, derived = self._variant_defaults(variant), []
        for f in dataclasses.fields(self):
            if f.default is None and f.name in defaults:
                value = getattr(self, f.name)
                if value is not None:
                    explicit.add(f.name)
                elif callable(defaults[f.name]):  # derived from other fields: once those are set
                    derived.append(f.name)
                else:
                    object.__setattr__(self, f.name, _to_tuple(defaults[f.name]))
        for name in derived:
            object.__setattr__(self, name, _to_tuple(defaults[name](self)))
        for name, value in self._variant_fixed(variant).items():
            if getattr(self, name) == self.variant_default(name):
                object.__setattr__(self, name, value)
        object.__setattr__(self, "_explicit", frozenset(explicit))

    @classmethod
    def _variant_defaults(cls, variant: str) -> dict[str, Any]:
        return {**cls.VARIANT_DEFAULTS.get(ALL_VARIANTS, {}), **cls.VARIANT_DEFAULTS.get(variant, {})}

    @classmethod
    def _variant_fixed(cls, variant: str) -> dict[str, Any]:
        return {**cls.VARIANT_FIXED.get(ALL_VARIANTS, {}), **cls.VARIANT_FIXED.get(variant, {})}

    def variant_default(self, name: str, variant: str | None = None) -> Any:
        """The default of field ``name`` under ``variant`` (default: this config's variant)."""
        variant = getattr(self, "variant", None) if variant is None else variant
        defaults = self._variant_defaults(variant) if self.VARIANTS else {}
        if name in defaults:
            return _to_tuple(defaults[name](self) if callable(defaults[name]) else defaults[name])
        f = {f.name: f for f in dataclasses.fields(self)}[name]
        return f.default_factory() if f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING else f.default

    def variant_reads(self, name: str, variant: str | None = None) -> bool:
        """Whether ``variant`` (default: this config's) reads field ``name``."""
        variant = getattr(self, "variant", None) if variant is None else variant
        return name not in self.VARIANT_ONLY or variant in self.VARIANT_ONLY[name]

    def _check_variant_settings(self) -> None:
        """A setting the variant ignores (moved from its default), or a fixed setting changed,
        is a :class:`ConfigError` naming the field."""
        variant = self.variant
        for name, value in self._variant_fixed(variant).items():
            if getattr(self, name) != value:
                raise ConfigError(name, f"variant {variant!r} fixes {name}={value!r}; got {getattr(self, name)!r}")
        for name, users in self.VARIANT_ONLY.items():
            if variant not in users and getattr(self, name) != self.variant_default(name):
                raise ConfigError(name, f"is ignored by variant {variant!r} (used only by {', '.join(users)}); "
                                        f"leave it at {self.variant_default(name)!r} or choose that variant")

    # -- presets: one mechanism ----------------------------------------------------------------
    @classmethod
    def preset(cls, name: str, quick: bool = True, **changes) -> "ParamsBase":
        """The config of preset ``name`` (quick or full settings, see :data:`PRESETS`), with
        ``changes`` on top; an unknown name is a :class:`ConfigError`."""
        if name not in cls.PRESETS:
            known = ", ".join(cls.PRESETS) or "none"
            raise ConfigError("preset", f"{cls.__name__} has no preset {name!r}; known: {known}")
        return cls(**{**cls.PRESETS[name].settings(cls, quick), **changes})

    def validate(self) -> None:  # pragma: no cover - overridden
        pass

    # -- time: one place per paper -------------------------------------------------------------
    def log_steps(self) -> np.ndarray:
        """Optimiser steps at which training logs (0 and the last step included)."""
        try:
            return log_steps(int(self.steps), int(self.log_every))
        except AttributeError:  # pragma: no cover - a config without steps must override
            raise NotImplementedError(f"{type(self).__name__} defines no steps/log_every; override log_steps")

    def ode_time(self, step: int | float) -> float:  # pragma: no cover - overridden
        """The reduced system's time at optimiser step ``step``."""
        raise NotImplementedError(f"{type(self).__name__} must define ode_time(step)")

    def ode_times(self, steps: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """``[ode_time(s) for s in steps]`` (default: :meth:`log_steps`), float64."""
        steps = self.log_steps() if steps is None else steps
        return np.array([self.ode_time(int(s)) for s in steps], dtype=np.float64)

    # -- dict / overrides ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def explicit(self) -> frozenset:
        """Fields with a per-variant default that were set explicitly (they keep their value when
        the variant changes; the others follow the variant)."""
        return getattr(self, "_explicit", frozenset())

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any], *, field: str = "config") -> "ParamsBase":
        """A config from a dict of its fields (e.g. read back from a trajectory's attributes; lists
        become tuples). Missing fields take their defaults; an unknown one is a ``ConfigError``."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ConfigError(field, f"{cls.__name__} has no field(s) {', '.join(unknown)}")
        return cls(**{k: _to_tuple(v) for k, v in fields.items()})

    def replace(self, **changes) -> "ParamsBase":
        """A new (validated) config with ``changes``. Fields with a per-variant default that were
        not set explicitly follow the (possibly new) variant."""
        known = {f.name for f in dataclasses.fields(self)}
        for k in changes:
            if k not in known:
                raise ConfigError(k, f"unknown parameter; known: {', '.join(sorted(known))}")
        if not self.VARIANTS:
            return dataclasses.replace(self, **changes)
        per_variant = {name for defaults in self.VARIANT_DEFAULTS.values() for name in defaults}
        follow = {f.name for f in dataclasses.fields(self) if f.default is None and f.name in per_variant} - set(
            self.explicit)  # a None-default field without per-variant defaults (SCB's P) is a plain setting
        keep = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in follow}
        if "variant" in changes:  # values the old variant imposed are not settings of the new one
            for name, value in self._variant_fixed(self.variant).items():
                if keep.get(name) == value and name not in changes:
                    keep[name] = self.variant_default(name, changes["variant"])
        new = type(self)(**{**keep, **changes})
        for name, value in new._variant_fixed(new.variant).items():
            # a change equal to the field's default is indistinguishable from no change at
            # construction (the variant imposes its value): refuse it here, never drop it
            if name in changes and _to_tuple(changes[name]) != value:
                raise ConfigError(name, f"variant {new.variant!r} fixes {name}={value!r}; got {changes[name]!r}")
        return new

    def with_overrides(self, assignments: Sequence[str]) -> "ParamsBase":
        """Apply ``["key=value", ...]`` with values parsed as Python/JSON literals and coerced to
        the field's type. A key given twice is ``ConfigError(key, "set twice ...")``."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        given: dict[str, str] = {}
        for item in assignments:
            if "=" not in item:
                raise ConfigError("set", f"expected key=value, got {item!r}")
            key, raw = (s.strip() for s in item.split("=", 1))
            if key not in fields:
                raise ConfigError(key, f"unknown parameter; known: {', '.join(sorted(fields))}")
            if key in given:  # never keep one of two values silently
                raise ConfigError(key, f"set twice ({key}={given[key]} and {key}={raw}); give it once")
            given[key] = raw
            current = getattr(self, key)
            try:
                value = ast.literal_eval(raw)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = raw
            changes[key] = _coerce(key, value, current, _annotation(fields[key]))
        try:
            return self.replace(**changes)
        except ConfigError:
            raise
        except (ValueError, TypeError, OverflowError, ArithmeticError) as err:
            # a paper's validate() tripped over a value before naming it: blame the overrides
            raise ConfigError(", ".join(changes) or "config", " ".join(str(err).split())) from None


#: seeds are handed to numpy/torch/jax generators, which take unsigned 32-bit integers
SEED_MAX = 2**32 - 1


def _annotation(f: dataclasses.Field) -> str:
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


def is_seed(name: str) -> bool:
    """Fields named ``seed`` or ``*_seed`` are random seeds (range ``[0, SEED_MAX]``)."""
    return name == "seed" or name.endswith("_seed")


def check_field_types(config: Any) -> None:
    """The checks every Config shares, run before the paper's ``validate()``: ``int`` fields hold
    integers (not bools), ``float`` fields finite reals (unless the default is infinite), ``bool``
    fields bools, seeds ``0 <= seed <= 2**32 - 1``, numeric tuple fields (nested) real numbers."""
    for f in dataclasses.fields(config):
        ann, v = _annotation(f), getattr(config, f.name)
        if v is not None and ann.endswith(" | None"):  # a per-variant default, resolved: check its type
            ann = ann[: -len(" | None")]
        if ann == "bool":
            if not isinstance(v, (bool, np.bool_)):
                raise ConfigError(f.name, f"expected true/false, got {v!r}")
        elif ann == "int":
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise ConfigError(f.name, f"expected an integer, got {v!r}")
            if is_seed(f.name) and not 0 <= int(v) <= SEED_MAX:
                raise ConfigError(f.name, f"a seed must lie in [0, {SEED_MAX}], got {v}")
        elif ann == "float":
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ConfigError(f.name, f"expected a number, got {v!r}")
            default = f.default if isinstance(f.default, (int, float)) else 0.0
            if math.isnan(v) or (math.isinf(v) and not math.isinf(default)):
                raise ConfigError(f.name, f"must be a finite number, got {v!r}")
        elif ann == "str":
            if not isinstance(v, str):
                raise ConfigError(f.name, f"expected a string, got {v!r}")
        elif "tuple" in ann and "str" not in ann and v is not None:
            _check_numeric_leaves(f.name, v)


def _check_numeric_leaves(key: str, v: Any) -> None:
    if isinstance(v, (list, tuple)):
        if len(v) == 0:
            raise ConfigError(key, "expected a number or a (nested) list of numbers, got an empty list")
        for x in v:
            _check_numeric_leaves(key, x)
    elif isinstance(v, np.ndarray):
        if not np.issubdtype(v.dtype, np.number):
            raise ConfigError(key, f"expected numbers, got an array of {v.dtype}")
    elif isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ConfigError(key, f"expected a number or a (nested) list of numbers, got {v!r}")
    elif not math.isfinite(v):
        raise ConfigError(key, f"entries must be finite, got {v!r}")


def _coerce(key: str, value: Any, current: Any, annotation: str = "") -> Any:
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false", "1", "0", "yes", "no"}:
            return value.lower() in {"true", "1", "yes"}
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ConfigError(key, f"expected true/false, got {value!r}")
    if isinstance(current, int):
        if isinstance(value, float) and math.isfinite(value) and value == int(value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {_short(value)}")
        return value
    if isinstance(current, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {_short(value)}")
        try:
            return float(value)
        except OverflowError:
            raise ConfigError(key, f"number out of range: {_short(value)}") from None
    if isinstance(current, str):
        return str(value)
    if isinstance(current, tuple) or current is None:
        if isinstance(value, list):
            value = _to_tuple(value)
        if "tuple" in annotation and "str" not in annotation and value is not None:
            _check_numeric_leaves(key, value)
        return value
    return value


def _short(v: Any, n: int = 40) -> str:
    r = repr(v)
    return r if len(r) <= n else r[: n - 3] + "..."


def _to_tuple(v):
    return tuple(_to_tuple(x) for x in v) if isinstance(v, (list, tuple)) else v
