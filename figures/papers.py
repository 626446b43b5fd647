"""The paper table: every paper tdyn knows, one row each (scipy ``METHODS`` style).

The CLI, ``tdyn reproduce``, the sweep runner and the tests iterate over :data:`PAPERS`; nothing
discovers papers by naming convention. A row names, as ``"module:attribute"`` references resolved
on first use (so ``tdyn derive`` never imports torch), the paper's

============  ===============================================================================
slot          signature
============  ===============================================================================
config        ``Config`` class (a frozen :class:`theory.ParamsBase`; owns ``log_steps``/``ode_time``)
systems       ``systems(config) -> list[ReducedSystem]`` (what ``tdyn derive`` prints)
problem       ``problem(config) -> theory.Problem`` (what ``tdyn simulate`` integrates)
sde           ``sde(config) -> (model, config.ode_times())`` for ``simulate.solve_sde`` — or
              ``None`` with a reason
train         ``run(config, *, device, variant, progress, checkpoint, checkpoint_every, resume)
              -> Trajectory`` (``empirical/<p>/experiment.py:run``) logged at
              ``config.log_steps()``, time ``config.ode_times()``; ``variant`` is the config's own
train_seeds   optional: ``train_seeds(config, *, seeds, device) -> Trajectory`` with dims ``(seed,
              time)``, every seed of the train slot in one batched call, equal to its per-seed runs
              (tested); raises ``ConfigError`` for a config it does not batch. The claims use it
              for the train slot's seeds where it is given (:func:`figures.claims.claim_cell`)
compare       ``compare(ctx, *, quick, device) -> figures.report.Report`` (agreement + claims) under a
              :class:`figures.context.RunContext` (``quick``/``device``, when given, override it)
figures       ``FIGURES``: a sequence of ``fig_x(outdir | None, quick, *, device) -> data``, run by
              the one collector :func:`figures.make.make_figures`; a figure that reads the corpus
              or keeps runs in a store also declares a keyword ``ctx`` (the run's ``RunContext``)
estimate      ``estimate(config, command, paths) -> list[theory.limits.Term]``: the paper's
              resource terms (what ``--allow-large`` guards), beside its Config
text          the paper's real-text protocol: a Config class with ``quick()``/``full()`` presets,
              ``protocol(*, device, progress, store, workers, ray) -> dict`` and
              ``sweep_run()`` (what ``tdyn sweep P --kind text`` sweeps) — or ``None`` with a reason
claims        ``claims(ctx, *, quick, device, progress) -> list[figures.claims.ClaimResult]``: the paper's
              claims decided over seeds with their validity maps (``figures/<p>/claims.toml`` +
              ``figures.claims.registry_claims``; ``docs/claims.md``)
============  ===============================================================================

``missing`` maps an unfilled slot to the one-line reason it is not filled.

**A paper is a plugin.** The table is built from the ``tdyn.papers`` entry points of the installed
distributions: each names a :class:`Paper` row (``name = "package.module:PAPER"``, the entry point's
name equal to the row's). tdyn's own papers register the same way (``figures/<p>/paper.py``,
``pyproject.toml``); ``tdyn new-paper NAME`` writes a package that does (``docs/adding-a-paper.md``).
:func:`register` adds a row by hand (a notebook, a test). Reading the table imports no matplotlib,
torch or jax: the rows name their slots as ``"module:attribute"`` strings.

**Variants** are the Config's: ``Paper.variants`` lists ``Config.VARIANTS``
(:class:`theory.ParamsBase`). ``tdyn train P --variant V`` (and ``tdyn sweep``) build the config with
``variant=V`` first, then apply ``--set`` (:meth:`Paper.make_config`), so the overrides act on the
variant's defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from theory.errors import ConfigError, did_you_mean
from theory.refs import resolve_ref

__all__ = ["Paper", "PAPERS", "SLOTS", "ENTRY_POINTS", "get", "register", "paper_names", "load_entry_points"]

Ref = str | Callable[..., Any] | type
SLOTS = ("config", "systems", "problem", "sde", "train", "compare", "figures", "estimate", "text", "claims")
#: the entry-point group a paper's package registers its row under
ENTRY_POINTS = "tdyn.papers"


@dataclass(frozen=True)
class Paper:
    """One row of the table (see the module docstring for each slot's signature)."""

    name: str
    title: str
    spec: str
    config: Ref
    systems: Ref
    problem: Ref
    train: Ref
    compare: Ref
    figures: Ref
    sde: Ref | None = None
    estimate: Ref | None = None
    text: Ref | None = None
    claims: Ref | None = None
    #: optional batched runner of the train slot (not in :data:`SLOTS`: a row without one trains seed by seed)
    train_seeds: Ref | None = None
    missing: Mapping[str, str] = field(default_factory=dict)
    #: CPU seconds of the quick `tdyn figures` (measured on an idle 2-core machine): `tdyn reproduce
    #: --jobs J` starts the longest papers first, so that no long paper is left running alone at the end
    quick_seconds: float = 0.0

    def __post_init__(self):
        for slot in SLOTS:
            if getattr(self, slot) is None and slot not in self.missing:
                raise ValueError(f"paper {self.name}: slot {slot!r} is empty and `missing` gives no reason")

    def slot(self, name: str) -> Callable[..., Any]:
        """The resolved callable (or class) of a slot; ``ConfigError`` if the paper lacks it."""
        ref = getattr(self, name)
        if ref is None:
            raise ConfigError(name, f"{self.name} has no {name}: {self.missing.get(name, 'not provided')}")
        return resolve_ref(ref)

    @property
    def Config(self) -> type:
        return self.slot("config")

    @property
    def variants(self) -> tuple[str, ...]:
        """The Config's ``VARIANTS`` (names); empty where it declares none."""
        return tuple(getattr(self.Config, "VARIANTS", None) or ())

    @property
    def config_has_variant(self) -> bool:
        """Whether the Config owns the variant (a ``variant`` field)."""
        return "variant" in {f.name for f in dataclasses.fields(self.Config)}

    def make_config(self, assignments: Sequence[str] = (), *, variant: str | None = None, base: Any = None) -> Any:
        """The config (``base``, default the Config's defaults) bound to ``variant`` first, then
        with ``key=value`` overrides applied (validated). A row whose Config has no ``variant``
        field leaves ``variant`` to the train slot (:meth:`train_variant`)."""
        self.check_variant(variant)
        owns = variant is not None and self.config_has_variant
        if base is None:
            cfg = self.Config(variant=variant) if owns else self.Config()
        else:
            cfg = base.replace(variant=variant) if owns and base.variant != variant else base
        cfg = cfg.with_overrides(list(assignments))
        if owns and cfg.variant != variant:
            raise ConfigError("variant", f"--variant {variant} and --set variant={cfg.variant} disagree")
        return cfg

    def train_variant(self, config: Any, variant: str | None = None) -> str | None:
        """The train slot's ``variant=`` keyword: the config's own variant where the Config has one
        (one mechanism), else ``variant`` as given (rows whose Config has no variant field yet)."""
        return config.variant if self.config_has_variant else variant

    def check_variant(self, variant: str | None) -> None:
        if variant is not None and variant not in self.variants:
            raise ConfigError("variant", f"{self.name}: must be one of {self.variants}, got {variant!r}"
                                         f"{did_you_mean(variant, self.variants)}")

    @property
    def module(self) -> str:
        """The python name used for this paper's modules and output folder (``scan-snap`` -> ``scan_snap``)."""
        return self.name.replace("-", "_")


PAPERS: dict[str, Paper] = {}


def register(paper: Paper, *, replace: bool = False) -> Paper:
    """Add a row to :data:`PAPERS` (``replace=True`` to overwrite one)."""
    if paper.name in PAPERS and not replace:
        raise ValueError(f"paper {paper.name!r} is already registered")
    PAPERS[paper.name] = paper
    return paper


def paper_names() -> list[str]:
    return list(PAPERS)


def get(name: str) -> Paper:
    """The row for ``name``; ``ConfigError('paper', ...)`` for an unknown name."""
    if name not in PAPERS:
        raise ConfigError("paper", f"unknown paper {name!r}{did_you_mean(name, PAPERS)}; known: {', '.join(PAPERS)}")
    return PAPERS[name]


def load_entry_points() -> list[str]:
    """Register the row of every installed ``tdyn.papers`` entry point not yet in the table, in the
    order the distributions list them; returns the names added. A plugin that fails to load, or whose
    entry point does not name a :class:`Paper` of the entry point's name, is skipped with a warning (one
    broken plugin does not take the tool down)."""
    import warnings
    from importlib.metadata import entry_points

    added = []
    for ep in entry_points(group=ENTRY_POINTS):
        if ep.name in PAPERS:
            continue  # the same distribution seen twice on sys.path (an editable install and a checkout)
        try:
            row = ep.load()
        except Exception as exc:  # noqa: BLE001 - a third party's import error, reported and skipped
            warnings.warn(f"tdyn: paper plugin {ep.name!r} ({ep.value}) failed to load: "
                          f"{type(exc).__name__}: {exc}", stacklevel=2)
            continue
        if not isinstance(row, Paper) or row.name != ep.name:
            warnings.warn(f"tdyn: paper plugin {ep.name!r} ({ep.value}) does not name a Paper row called "
                          f"{ep.name!r}; skipped", stacklevel=2)
            continue
        register(row)
        added.append(row.name)
    return added


load_entry_points()
