"""The claims registry: a paper's headline claims as *data* (``figures/<p>/claims.toml``), read
with :mod:`tomllib` and validated into frozen records. The schema is documented in
``docs/claims.md``; :func:`load_registry` is the one reader.

Per claim: the statement as the paper makes it and where (``source``: section, theorem), the
paper's assumptions as a **regime** (parameter ranges or sets, each with the assumption it comes
from), the **protocol** (network, preset, variant, settings), the **statistic** (a function of one
seed's trajectory), the **criterion** derived from the theorem (a boundary and a direction, with
the derivation in words: a bare threshold is refused), the **falsifier**, and the **validity
map** (axes swept inside and outside the regime, seeds in quick and full mode).

Every error is a :class:`ConfigError` naming the field as a dotted path
(``claims.gap_shrinks.criterion.derivation``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from theory.errors import ConfigError
from theory.refs import resolve_ref

__all__ = ["SCHEMA", "DIRECTIONS", "ESTIMATORS", "MIN_SEEDS", "MIN_SEEDS_FULL", "PRACTICE", "CRITERION_KINDS",
           "Criterion", "RegimeBound", "Statistic", "Axis", "Cost", "MapSpec", "Protocol", "NullControl", "Demo",
           "Robustness", "ClaimSpec", "Registry", "load_registry", "resolve_ref"]

#: the registry format's version (the ``schema`` key of every claims.toml)
SCHEMA = 1
#: where the statistic must lie for the claim to hold
DIRECTIONS = ("below", "above", "inside")
#: what is estimated over seeds, and tested (figures.claims.stats): the median (exact sign test, the
#: default), the proportion of seeds with statistic 1 (exact binomial test), the mean (t-test: assumes
#: near-normal per-seed values)
ESTIMATORS = ("median", "proportion", "mean")
#: what the practice side of a claim is: the paper's reduced / reparameterised / linearised model (whose
#: flow is the theory), the network as the paper states it, or a standard transformer
PRACTICE = ("reduced model", "the paper's network", "standard transformer")
#: where a criterion's boundary comes from: the theorem's statement with its error terms, or a declared
#: effect size (reported with sensitivity verdicts at 1/2x and 2x the boundary)
CRITERION_KINDS = ("theorem", "effect size")
#: no verdict from fewer seeds; full mode needs at least MIN_SEEDS_FULL
MIN_SEEDS, MIN_SEEDS_FULL = 5, 12
#: the t-test of a mean is used only with this many seeds (runs), where its level holds for skewed
#: per-seed values too (simulated: tests/figures/test_claims_stats.py); below it, the median's sign test
MIN_SEEDS_MEAN = 500
#: a derivation (and a falsifier) is words, not a number
MIN_DERIVATION_WORDS, MIN_FALSIFIER_WORDS = 10, 6
_PLACEHOLDER = re.compile(r"\b(todo|tbd|fixme|xxx|placeholder)\b", re.IGNORECASE)
_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


# ------------------------------------------------------------------------------------------------
# Records
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Criterion:
    """Where the statistic's estimand must lie for the claim to hold: ``below``/``above`` a
    ``boundary``, or ``inside`` ``(lo, hi)``; ``derivation`` says in words how the boundary and the
    direction follow from the theorem."""

    direction: str
    boundary: float | tuple[float, float]
    derivation: str
    kind: str = "theorem"

    def scaled(self, factor: float) -> "Criterion":
        """The criterion with its boundary moved ``factor`` times as far from 0 (``inside``: the
        band's half-width scaled about its centre) - the sensitivity rows of an effect size."""
        if self.direction == "inside":
            lo, hi = self.boundary
            c, h = (lo + hi) / 2, (hi - lo) / 2 * factor
            return dataclasses.replace(self, boundary=(c - h, c + h))
        return dataclasses.replace(self, boundary=float(self.boundary) * factor)

    def verdict(self, lo: float, hi: float) -> str:
        """``holds`` when the interval ``[lo, hi]`` lies strictly on the holding side, ``fails``
        when strictly on the other, ``inconclusive`` when it touches or straddles the boundary."""
        if self.direction == "below":
            b = float(self.boundary)
            return "holds" if hi < b else "fails" if lo > b else "inconclusive"
        if self.direction == "above":
            b = float(self.boundary)
            return "holds" if lo > b else "fails" if hi < b else "inconclusive"
        a, b = self.boundary
        if a < lo and hi < b:
            return "holds"
        return "fails" if hi < a or lo > b else "inconclusive"

    def margin(self, lo: float, hi: float) -> float:
        """How far ``[lo, hi]`` lies inside the holding side (negative: on the failing side): the
        distance from the boundary to the interval's nearest end."""
        if self.direction == "below":
            return float(self.boundary) - hi
        if self.direction == "above":
            return lo - float(self.boundary)
        a, b = self.boundary
        if hi < a:
            return hi - a
        if lo > b:
            return b - lo
        return min(lo - a, b - hi)

    def describe(self) -> str:
        """``< 0``, ``> 0.5``, ``in [0.9, 1.1]``: where the claim holds."""
        if self.direction == "inside":
            return f"in [{_num(self.boundary[0])}, {_num(self.boundary[1])}]"
        return f"{'<' if self.direction == 'below' else '>'} {_num(self.boundary)}"

    def to_json(self) -> dict[str, Any]:
        return {"direction": self.direction, "boundary": list(self.boundary) if self.direction == "inside"
                else self.boundary, "derivation": self.derivation, "holds_when": self.describe(), "kind": self.kind}


@dataclass(frozen=True)
class RegimeBound:
    """One assumption of the paper as a range (closed, ``inf`` allowed) or a set of a quantity: a
    config field, a map axis, or a derived quantity of the claim's ``quantities`` function."""

    quantity: str
    assumption: str
    range: tuple[float, float] | None = None
    values: tuple[Any, ...] | None = None
    label: str = ""

    def contains(self, value: Any) -> bool:
        if self.values is not None:
            return value in self.values
        try:
            v = float(value)
        except (TypeError, ValueError):
            return False
        return bool(self.range[0] <= v <= self.range[1])

    def describe(self) -> str:
        name = self.label or self.quantity
        if self.values is not None:
            return f"{name} in {{{', '.join(_num(v) for v in self.values)}}}"
        lo, hi = self.range
        if math.isinf(lo):
            return f"{name} <= {_num(hi)}"
        if math.isinf(hi):
            return f"{name} >= {_num(lo)}"
        return f"{name} in [{_num(lo)}, {_num(hi)}]"

    def to_json(self) -> dict[str, Any]:
        out = {"quantity": self.quantity, "assumption": self.assumption, "holds_in": self.describe()}
        if self.values is not None:
            out["values"] = list(self.values)
        else:
            out["range"] = [None if math.isinf(x) else x for x in self.range]
        return out


@dataclass(frozen=True)
class Statistic:
    """The per-seed number a claim is decided on: ``function(trajectory, config, **coords) ->
    float`` (``"module:function"``; the same function is applied to the network's and the
    theory's trajectories), estimated over seeds by ``estimator``."""

    name: str
    description: str
    function: str
    estimator: str = "median"
    symbol: str = ""
    unit: str = ""

    @property
    def label(self) -> str:
        """Axis label: the symbol (math) with its unit."""
        s = self.symbol or self.name.replace("_", " ")
        return f"{s} [{self.unit}]" if self.unit else s

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Axis:
    """One axis of the validity map. ``target="config"``: a Config field, one sweep cell per
    value; ``target="statistic"``: a keyword of the statistic, evaluated on the same runs (a time
    or a horizon: no retraining)."""

    name: str
    target: str
    values: tuple[Any, ...]
    quick: tuple[Any, ...]
    label: str = ""
    unit: str = ""
    scale: str = "linear"

    def points(self, quick: bool) -> tuple[Any, ...]:
        return self.quick if quick else self.values

    @property
    def axis_label(self) -> str:
        s = self.label or self.name.replace("_", " ")
        return f"{s} [{self.unit}]" if self.unit else s

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target, "label": self.axis_label, "scale": self.scale}


@dataclass(frozen=True)
class Cost:
    """What one map cell costs on a CPU, for ``--full`` to say which maps need a GPU or a cluster
    (:func:`figures.claims.map_cost`): ``seed_seconds`` (CPU core-seconds per seed of any cell) or
    ``function`` (``"module:function"``, ``fn(config, seeds) -> core-seconds`` of the cell of
    ``config`` with ``seeds`` seeds); ``note`` says where the number comes from (a measurement)."""

    seed_seconds: float | None = None
    function: str = ""
    note: str = ""

    def cell_seconds(self, config, seeds: int, field: str = "cost") -> float:
        if self.function:
            sec = float(resolve_ref(self.function, f"{field}.function")(config, seeds))
        else:
            sec = float(self.seed_seconds) * seeds
        if not (math.isfinite(sec) and sec >= 0):
            raise ConfigError(f"{field}.function", f"must return core-seconds >= 0, got {sec!r}")
        return sec

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v not in (None, "")}


@dataclass(frozen=True)
class MapSpec:
    """The validity map: its axes (at most three), the seeds decided at every point and what a
    cell costs (``cost``, optional: a map without one is assumed to fit a CPU)."""

    axes: tuple[Axis, ...]
    seeds_quick: int
    seeds_full: int
    cost: Cost | None = None

    def seeds(self, quick: bool) -> int:
        return self.seeds_quick if quick else self.seeds_full

    def axis(self, name: str) -> Axis:
        return next(a for a in self.axes if a.name == name)


@dataclass(frozen=True)
class Protocol:
    """Which network and setting a claim is measured on: ``network`` (one line for a reader),
    the Config ``preset`` (quick/full), the ``variant`` and further ``settings`` on top."""

    network: str
    preset: str = ""
    variant: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)
    #: ``"module:Class"``: the Config class of this claim's runs when it is not the paper row's
    #: (e.g. a real-text protocol); empty: the row's
    config_class: str = ""

    def config_cls(self, row_config: type) -> type:
        """The Config class of the claim's runs: :attr:`config_class`, else ``row_config``."""
        return resolve_ref(self.config_class, "protocol.config") if self.config_class else row_config

    def config(self, config_cls: type, quick: bool):
        """The protocol's Config (validated): preset, then variant, then settings. ``config_cls``
        is the row's Config; :attr:`config_class` replaces it when given."""
        config_cls = self.config_cls(config_cls)
        cfg = config_cls.preset(self.preset, quick=quick) if self.preset else config_cls()
        if self.variant:
            cfg = cfg.replace(variant=self.variant)
        if self.settings:
            cfg = cfg.with_overrides([f"{k}={v!r}" for k, v in self.settings.items()])
        return cfg

    def to_json(self) -> dict[str, Any]:
        out = {"network": self.network, "preset": self.preset, "variant": self.variant, "settings": dict(self.settings)}
        if self.config_class:
            out["config"] = self.config_class
        return out


@dataclass(frozen=True)
class NullControl:
    """The natural alternative a claim's criterion must reject (vanilla SGD for an l1 claim, an
    untrained or shuffled-data run for a learning claim): run at one in-regime point ``at`` (a value
    per map axis) with the claim's seeds, ``settings``/``variant`` on top of that point's config, or
    its own ``runs`` function; decided with the claim's test. If it *holds*, the claim's criterion
    does not discriminate."""

    description: str
    at: Mapping[str, Any]
    settings: Mapping[str, Any] = field(default_factory=dict)
    variant: str = ""
    runs: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"description": self.description, "at": dict(self.at), "settings": dict(self.settings),
                "variant": self.variant, "runs": self.runs}


@dataclass(frozen=True)
class Demo:
    """The paper's own demonstration setting (the figure or table a claim comes from): a value
    per map axis (config values may lie off the grid: it is then a cell of its own). Always on the
    map, quick and full; inside the regime it is one of the family's points."""

    label: str
    coords: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "coords": dict(self.coords)}


@dataclass(frozen=True)
class Robustness:
    """A protocol variant the verdict must survive (a longer horizon, another stopping rule, a
    wider grid): Config overrides (``settings``, new cells) and/or statistic keyword overrides
    (``statistic``), the claim re-decided over its in-regime points."""

    name: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    statistic: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "settings": dict(self.settings), "statistic": dict(self.statistic)}


@dataclass(frozen=True)
class ClaimSpec:
    """One claim of the registry (see the module docstring; fields as in ``docs/claims.md``)."""

    paper: str
    name: str
    statement: str
    source: str
    protocol: Protocol
    regime: tuple[RegimeBound, ...]
    statistic: Statistic
    criterion: Criterion
    falsifier: str
    map: MapSpec
    quantities: str = ""
    derived: tuple[str, ...] = ()
    runs: str = ""
    theory: str = ""
    practice: str = "reduced model"
    theory_flow: str = ""
    null: NullControl | None = None
    demos: tuple[Demo, ...] = ()
    robustness: tuple[Robustness, ...] = ()

    @property
    def theory_exact(self) -> bool:
        """Whether the theory check runs on the exact (un-reduced) flow (``theory_flow`` starts
        with ``exact:``)."""
        return self.theory_flow.startswith("exact:")

    @property
    def field(self) -> str:
        return f"claims.{self.name}"

    def regime_text(self) -> str:
        return "; ".join(r.describe() for r in self.regime)

    def functions(self) -> dict[str, Callable[..., Any]]:
        """The resolved ``statistic``/``quantities``/``runs``/``theory`` functions (those given),
        the protocol's Config class and the map's cost function (when named)."""
        refs = {"statistic": self.statistic.function, "quantities": self.quantities, "runs": self.runs,
                "theory": self.theory, "protocol.config": self.protocol.config_class,
                "null.runs": self.null.runs if self.null else "",
                "map.cost.function": self.map.cost.function if self.map.cost else ""}
        return {k: resolve_ref(r, f"{self.field}.{k}") for k, r in refs.items() if r}

    def regime_point(self, config, coords: Mapping[str, Any]) -> tuple[bool, tuple[str, ...], dict[str, Any]]:
        """``(inside, violated, quantities)`` at a map point: every regime bound checked on the
        point's coordinate, derived quantity or config field (in that order)."""
        derived: dict[str, Any] = {}
        if self.quantities:
            derived = dict(resolve_ref(self.quantities, f"{self.field}.quantities")(config, dict(coords)))
            missing = sorted(set(self.derived) - set(derived))
            if missing:
                raise ConfigError(f"{self.field}.quantities", f"returned no {', '.join(missing)}")
        violated = []
        for i, r in enumerate(self.regime):
            if r.quantity in coords:
                v = coords[r.quantity]
            elif r.quantity in derived:
                v = derived[r.quantity]
            elif hasattr(config, r.quantity):
                v = getattr(config, r.quantity)
            else:
                raise ConfigError(f"{self.field}.regime.{i}.quantity",
                                  f"{r.quantity!r} is neither a map axis, a derived quantity nor a config field")
            if not r.contains(v):
                violated.append(f"{r.label or r.quantity} = {_num(v)}, regime {r.describe()}")
        return not violated, tuple(violated), derived


@dataclass(frozen=True)
class Registry:
    """A paper's claims, in file order."""

    paper: str
    path: str
    claims: tuple[ClaimSpec, ...]

    def get(self, name: str) -> ClaimSpec:
        for c in self.claims:
            if c.name == name:
                return c
        raise ConfigError("claim", f"{self.paper} has no claim {name!r}; known: {', '.join(self.names)}")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.claims]


# ------------------------------------------------------------------------------------------------
# The reader
# ------------------------------------------------------------------------------------------------
def load_registry(path: str | Path, *, paper: str | None = None, config: type | None = None,
                  resolve: bool = False) -> Registry:
    """Read and validate ``path`` (a claims.toml). With ``paper``, the file must be that paper's;
    with ``config`` (the paper's Config class), config axes and regime quantities must be its
    fields and every protocol must build a valid config (quick and full); with ``resolve``, every
    ``"module:function"`` reference must import. Raises :class:`ConfigError` naming the field."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("registry", f"no such file: {p}")
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError("registry", f"{p}: {err}") from None
    _keys(doc, "", required={"schema", "paper", "claims"})
    if doc["schema"] != SCHEMA:
        raise ConfigError("schema", f"{p}: this tdyn reads schema {SCHEMA}, got {doc['schema']!r}")
    name = _str(doc, "", "paper")
    if paper is not None and name != paper:
        raise ConfigError("paper", f"{p} is the registry of {name!r}, not {paper!r}")
    claims = doc["claims"]
    if not isinstance(claims, dict) or not claims:
        raise ConfigError("claims", f"{p}: give at least one [claims.<name>] table")
    specs = tuple(_claim(name, cname, body, config) for cname, body in claims.items())
    if resolve:
        for s in specs:
            s.functions()
    return Registry(name, str(p), specs)


def _claim(paper: str, name: str, body: Any, config: type | None) -> ClaimSpec:
    f = f"claims.{name}"
    if not _NAME.match(name):
        raise ConfigError(f, "a claim name is lower_snake_case (letters, digits, _)")
    if not isinstance(body, dict):
        raise ConfigError(f, "must be a table")
    _keys(body, f, required={"statement", "source", "protocol", "regime", "statistic", "criterion", "falsifier", "map",
                             "practice", "null"},
          optional={"quantities", "runs", "theory", "theory_flow", "demo", "robustness"})
    statement, source = _str(body, f, "statement"), _str(body, f, "source")
    falsifier = _words(body, f, "falsifier", MIN_FALSIFIER_WORDS)
    protocol = _protocol(body["protocol"], f"{f}.protocol")
    statistic = _statistic(body["statistic"], f"{f}.statistic")
    criterion = _criterion(body["criterion"], f"{f}.criterion", statistic.estimator)
    quantities, derived = "", ()
    if "quantities" in body:
        q = body["quantities"]
        _keys(q, f"{f}.quantities", required={"function", "names"})
        quantities = _ref(q, f"{f}.quantities", "function")
        derived = tuple(_str_list(q, f"{f}.quantities", "names"))
    runs = _ref(body, f, "runs") if "runs" in body else ""
    theory = _ref(body, f, "theory") if "theory" in body else ""
    practice = _str(body, f, "practice")
    if practice not in PRACTICE:
        raise ConfigError(f"{f}.practice", f"must be one of {', '.join(repr(p) for p in PRACTICE)}, got {practice!r}")
    theory_flow = ""
    if theory:
        if "theory_flow" not in body:
            raise ConfigError(f"{f}.theory_flow", "missing: say which flow the theory check runs on "
                                                  "('exact: ...' for the un-reduced flow, or 'reduced: ...')")
        theory_flow = _words(body, f, "theory_flow", 4)
        if not theory_flow.startswith(("exact:", "reduced:")):
            raise ConfigError(f"{f}.theory_flow", f"must start with 'exact:' or 'reduced:', got {theory_flow!r}")
    elif "theory_flow" in body:
        raise ConfigError(f"{f}.theory_flow", "given without a theory function")
    mp = _map(body["map"], f"{f}.map")
    _mean_seeds(mp, statistic.estimator, f)
    regime = _regime(body["regime"], f"{f}.regime")
    if config is not None and protocol.config_class:
        config = resolve_ref(protocol.config_class, f"{f}.protocol.config")
    # names: config axes are config fields, statistic axes are not; regime quantities are known
    fields = {x.name for x in dataclasses.fields(config)} if config is not None else None
    for i, a in enumerate(mp.axes):
        if fields is not None and a.target == "config" and a.name not in fields:
            raise ConfigError(f"{f}.map.axes.{i}.name", f"{a.name!r} is not a field of {config.__name__}")
        if fields is not None and a.target == "statistic" and a.name in fields:
            raise ConfigError(f"{f}.map.axes.{i}.name", f"{a.name!r} is a config field: use target = \"config\"")
    known = {a.name for a in mp.axes} | set(derived) | (fields or set())
    for i, r in enumerate(regime):
        if fields is not None and r.quantity not in known:
            raise ConfigError(f"{f}.regime.{i}.quantity", f"{r.quantity!r} is neither a map axis, a derived "
                                                          f"quantity (quantities.names) nor a config field")
    _check_map_covers_regime(mp, regime, f)
    null = _null(body["null"], f"{f}.null", mp)
    demos = _demos(body.get("demo", []), f"{f}.demo", mp)
    robustness = _robustness(body.get("robustness", []), f"{f}.robustness")
    if config is not None:
        if "seed" not in fields and not runs:
            raise ConfigError(f"{f}.runs", f"{config.__name__} has no seed field: give a runs function")
        for quick in (True, False):
            try:
                base = protocol.config(config, quick)
                for combo in itertools.product(*[a.points(quick) for a in mp.axes if a.target == "config"]):
                    names = [a.name for a in mp.axes if a.target == "config"]
                    base.with_overrides([f"{k}={v!r}" for k, v in zip(names, combo)])
            except ConfigError as err:
                raise ConfigError(f"{f}.protocol", f"{'quick' if quick else 'full'}: {err}") from None
    if config is not None:
        names = [a.name for a in mp.axes if a.target == "config"]
        for i, d in enumerate(demos):
            try:
                protocol.config(config, True).with_overrides([f"{k}={d.coords[k]!r}" for k in names])
            except ConfigError as err:
                raise ConfigError(f"{f}.demo.{i}.coords", str(err)) from None
        for i, r in enumerate(robustness):
            for k in r.settings:
                if k not in fields:
                    raise ConfigError(f"{f}.robustness.{i}.settings.{k}", f"not a field of {config.__name__}")
        for k in null.settings:
            if k not in fields:
                raise ConfigError(f"{f}.null.settings.{k}", f"not a field of {config.__name__}")
    return ClaimSpec(paper, name, statement, source, protocol, regime, statistic, criterion, falsifier, mp,
                     quantities, derived, runs, theory, practice, theory_flow, null, demos, robustness)


def _coords(t: Any, f: str, mp: MapSpec) -> dict[str, Any]:
    """A point given as ``{axis: value}`` for every map axis."""
    if not isinstance(t, dict):
        raise ConfigError(f, "must be a table {axis = value, ...}")
    names = [a.name for a in mp.axes]
    for k in t:
        if k not in names:
            raise ConfigError(f"{f}.{k}", f"not a map axis; axes: {', '.join(names)}")
    for k in names:
        if k not in t:
            raise ConfigError(f"{f}.{k}", "missing: give a value for every map axis")
    return {k: t[k] for k in names}


def _null(t: Any, f: str, mp: MapSpec) -> NullControl:
    _keys(t, f, required={"description", "at"}, optional={"settings", "variant", "runs"})
    settings = t.get("settings", {})
    if not isinstance(settings, dict):
        raise ConfigError(f"{f}.settings", "must be a table of config fields")
    if not settings and "variant" not in t and "runs" not in t:
        raise ConfigError(f, "give settings, a variant or a runs function: the null must differ from the claim's runs")
    return NullControl(_words(t, f, "description", 3), _coords(t["at"], f"{f}.at", mp), dict(settings),
                       _str(t, f, "variant", True), _ref(t, f, "runs") if "runs" in t else "")


def _demos(t: Any, f: str, mp: MapSpec) -> tuple[Demo, ...]:
    if not isinstance(t, list):
        raise ConfigError(f, "give the paper's demonstration settings as [[...demo]] entries")
    out = []
    for i, d in enumerate(t):
        _keys(d, f"{f}.{i}", required={"label", "coords"})
        out.append(Demo(_words(d, f"{f}.{i}", "label", 2), _coords(d["coords"], f"{f}.{i}.coords", mp)))
    if len({d.label for d in out}) != len(out):
        raise ConfigError(f, "demonstration labels repeat")
    return tuple(out)


def _robustness(t: Any, f: str) -> tuple[Robustness, ...]:
    if not isinstance(t, list):
        raise ConfigError(f, "give the protocol variants as [[...robustness]] entries")
    out = []
    for i, r in enumerate(t):
        fi = f"{f}.{i}"
        _keys(r, fi, required={"name"}, optional={"settings", "statistic"})
        settings, stat = r.get("settings", {}), r.get("statistic", {})
        if not isinstance(settings, dict) or not isinstance(stat, dict) or not (settings or stat):
            raise ConfigError(fi, "give settings = {config overrides} and/or statistic = {keyword overrides}")
        out.append(Robustness(_str(r, fi, "name"), dict(settings), dict(stat)))
    if len({r.name for r in out}) != len(out):
        raise ConfigError(f, "robustness names repeat")
    return tuple(out)


def _check_map_covers_regime(mp: MapSpec, regime: Sequence[RegimeBound], f: str) -> None:
    """Where a regime bound is on a map axis, the axis must reach inside and outside it (in quick
    and full mode). Bounds on derived quantities are checked when the map is built."""
    for i, r in enumerate(regime):
        axis = next((a for a in mp.axes if a.name == r.quantity), None)
        if axis is None:
            continue
        for quick in (True, False):
            inside = [r.contains(v) for v in axis.points(quick)]
            if not any(inside):
                raise ConfigError(f"{f}.map.axes.{axis.name}", f"no {'quick' if quick else 'full'} value lies "
                                                               f"inside the regime {r.describe()}")


def _protocol(t: Any, f: str) -> Protocol:
    _keys(t, f, required={"network"}, optional={"preset", "variant", "settings", "config"})
    settings = t.get("settings", {})
    if not isinstance(settings, dict):
        raise ConfigError(f"{f}.settings", "must be a table of config fields")
    return Protocol(_str(t, f, "network"), _str(t, f, "preset", True), _str(t, f, "variant", True), dict(settings),
                    _ref(t, f, "config") if "config" in t else "")


def _statistic(t: Any, f: str) -> Statistic:
    _keys(t, f, required={"name", "description", "function"}, optional={"estimator", "symbol", "unit"})
    est = t.get("estimator", "median")
    if est not in ESTIMATORS:
        raise ConfigError(f"{f}.estimator", f"must be one of {ESTIMATORS}, got {est!r}")
    return Statistic(_str(t, f, "name"), _str(t, f, "description"), _ref(t, f, "function"), est,
                     _str(t, f, "symbol", True), _str(t, f, "unit", True))


def _criterion(t: Any, f: str, estimator: str) -> Criterion:
    _keys(t, f, required={"direction", "boundary", "derivation"}, optional={"kind"})
    kind = t.get("kind", "theorem")
    if kind not in CRITERION_KINDS:
        raise ConfigError(f"{f}.kind", f"must be one of {CRITERION_KINDS}, got {kind!r}")
    direction = t["direction"]
    if direction not in DIRECTIONS:
        raise ConfigError(f"{f}.direction", f"must be one of {DIRECTIONS}, got {direction!r}")
    derivation = _words(t, f, "derivation", MIN_DERIVATION_WORDS)
    b = t["boundary"]
    if direction == "inside":
        if not (isinstance(b, list) and len(b) == 2 and all(_is_num(x) for x in b)) or not b[0] < b[1]:
            raise ConfigError(f"{f}.boundary", f"direction 'inside' needs [lo, hi] with lo < hi, got {b!r}")
        bounds = (float(b[0]), float(b[1]))
        if not all(math.isfinite(x) for x in bounds):
            raise ConfigError(f"{f}.boundary", "must be finite")
        boundary: float | tuple[float, float] = bounds
        check = bounds
    else:
        if not _is_num(b) or not math.isfinite(b):
            raise ConfigError(f"{f}.boundary", f"direction {direction!r} needs one finite number, got {b!r}")
        boundary = float(b)
        check = (boundary,)
    if estimator == "proportion" and not all(0 < x < 1 for x in check):
        raise ConfigError(f"{f}.boundary", "a proportion's boundary lies in (0, 1)")
    return Criterion(direction, boundary, derivation, kind)


def _regime(t: Any, f: str) -> tuple[RegimeBound, ...]:
    if not isinstance(t, list) or not t:
        raise ConfigError(f, "give the paper's assumptions as [[...regime]] entries (at least one)")
    out = []
    for i, r in enumerate(t):
        fi = f"{f}.{i}"
        _keys(r, fi, required={"quantity", "assumption"}, optional={"range", "values", "label"})
        if ("range" in r) == ("values" in r):
            raise ConfigError(fi, "give exactly one of range = [lo, hi] or values = [...]")
        rng = vals = None
        if "range" in r:
            x = r["range"]
            if not (isinstance(x, list) and len(x) == 2 and all(_is_num(v) for v in x)) or any(map(math.isnan, x)) \
                    or not x[0] < x[1]:
                raise ConfigError(f"{fi}.range", f"expected [lo, hi] with lo < hi (inf allowed), got {x!r}")
            rng = (float(x[0]), float(x[1]))
        else:
            if not isinstance(r["values"], list) or not r["values"]:
                raise ConfigError(f"{fi}.values", "expected a non-empty list")
            vals = tuple(r["values"])
        out.append(RegimeBound(_str(r, fi, "quantity"), _words(r, fi, "assumption", 3), rng, vals,
                               _str(r, fi, "label", True)))
    return tuple(out)


def _cost(t: Any, f: str) -> Cost:
    _keys(t, f, required=set(), optional={"seed_seconds", "function", "note"})
    if ("seed_seconds" in t) == ("function" in t):
        raise ConfigError(f, "give exactly one of seed_seconds = <CPU core-seconds per seed of a cell> or "
                             "function = \"module:function\"")
    sec = None
    if "seed_seconds" in t:
        sec = t["seed_seconds"]
        if not _is_num(sec) or not math.isfinite(sec) or sec < 0:
            raise ConfigError(f"{f}.seed_seconds", f"expected CPU core-seconds >= 0, got {sec!r}")
        sec = float(sec)
    return Cost(sec, _ref(t, f, "function") if "function" in t else "", _str(t, f, "note", True))


def _map(t: Any, f: str) -> MapSpec:
    _keys(t, f, required={"axes", "seeds"}, optional={"cost"})
    seeds = t["seeds"]
    _keys(seeds, f"{f}.seeds", required={"quick", "full"})
    sq, sf = seeds["quick"], seeds["full"]
    for key, v, least in (("quick", sq, MIN_SEEDS), ("full", sf, MIN_SEEDS_FULL)):
        if not isinstance(v, int) or isinstance(v, bool) or v < least:
            raise ConfigError(f"{f}.seeds.{key}", f"must be an integer >= {least} (no verdict from fewer), got {v!r}")
    axes_t = t["axes"]
    if not isinstance(axes_t, list) or not 1 <= len(axes_t) <= 3:
        raise ConfigError(f"{f}.axes", "give one to three [[...map.axes]] entries")
    axes = []
    for i, a in enumerate(axes_t):
        fi = f"{f}.axes.{i}"
        _keys(a, fi, required={"name", "values"}, optional={"target", "quick", "label", "unit", "scale"})
        target = a.get("target", "config")
        if target not in ("config", "statistic"):
            raise ConfigError(f"{fi}.target", f"must be 'config' or 'statistic', got {target!r}")
        scale = a.get("scale", "linear")
        if scale not in ("linear", "log"):
            raise ConfigError(f"{fi}.scale", f"must be 'linear' or 'log', got {scale!r}")
        values = a["values"]
        quick = a.get("quick", values)
        for key, v in (("values", values), ("quick", quick)):
            if not isinstance(v, list) or not v or len(set(map(repr, v))) != len(v):
                raise ConfigError(f"{fi}.{key}", "expected a non-empty list of distinct values")
            if scale == "log" and not all(_is_num(x) and x > 0 for x in v):
                raise ConfigError(f"{fi}.{key}", "a log-scale axis needs positive numbers")
        axes.append(Axis(_str(a, fi, "name"), target, tuple(values), tuple(quick), _str(a, fi, "label", True),
                         _str(a, fi, "unit", True), scale))
    if len({a.name for a in axes}) != len(axes):
        raise ConfigError(f"{f}.axes", "axis names repeat")
    return MapSpec(tuple(axes), sq, sf, _cost(t["cost"], f"{f}.cost") if "cost" in t else None)


def _mean_seeds(mp: "MapSpec", estimator: str, f: str) -> None:
    """A mean is tested with Student's t only at >= MIN_SEEDS_MEAN seeds (quick and full)."""
    if estimator != "mean":
        return
    for key, v in (("quick", mp.seeds_quick), ("full", mp.seeds_full)):
        if v < MIN_SEEDS_MEAN:
            raise ConfigError(f"{f}.map.seeds.{key}", f"the t-test of a mean needs >= {MIN_SEEDS_MEAN} seeds to hold "
                                                      f"its level on skewed values, got {v}: use the median (sign test)")


# ------------------------------------------------------------------------------------------------
# Small readers (each names the field it rejects)
# ------------------------------------------------------------------------------------------------
def _keys(t: Any, f: str, *, required: set[str], optional: set[str] = frozenset()) -> None:
    if not isinstance(t, dict):
        raise ConfigError(f or "registry", "must be a table")
    for k in sorted(set(t) - required - set(optional)):  # first: a misspelt key is also a missing one
        raise ConfigError(f"{f}.{k}" if f else k, f"unknown key; known: {', '.join(sorted(required | set(optional)))}")
    for k in sorted(required - set(t)):
        raise ConfigError(f"{f}.{k}" if f else k, "missing")


def _str(t: Mapping, f: str, key: str, optional: bool = False) -> str:
    v = t.get(key, "" if optional else None)
    if not isinstance(v, str) or (not optional and not v.strip()):
        raise ConfigError(f"{f}.{key}" if f else key, f"expected a non-empty string, got {v!r}")
    return v.strip()


def _str_list(t: Mapping, f: str, key: str) -> list[str]:
    v = t[key]
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise ConfigError(f"{f}.{key}", f"expected a non-empty list of names, got {v!r}")
    return v


def _words(t: Mapping, f: str, key: str, least: int) -> str:
    v = _str(t, f, key)
    if len(v.split()) < least or _PLACEHOLDER.search(v):
        raise ConfigError(f"{f}.{key}", f"say in words (at least {least}, no placeholder) how it follows from the "
                                        f"paper; got {v!r}")
    return v


def _ref(t: Mapping, f: str, key: str) -> str:
    v = _str(t, f, key)
    if not _REF.match(v):
        raise ConfigError(f"{f}.{key}", f"expected \"module:function\", got {v!r}")
    return v


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _num(v: Any) -> str:
    if isinstance(v, float):
        return "inf" if math.isinf(v) and v > 0 else "-inf" if math.isinf(v) else f"{v:.4g}"
    return str(v)
