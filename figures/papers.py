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
compare       ``compare(*, quick, device) -> figures.report.Report`` (agreement + claims)
figures       ``FIGURES``: a sequence of ``fig_x(outdir | None, quick, *, device) -> data``, run by
              the one collector :func:`figures.core.make_figures` (a row still on its own
              ``make_figures(outdir, *, quick, device) -> list[Path]`` passes through until it moves)
estimate      ``estimate(config, command, paths) -> list[theory.limits.Term]``: the paper's
              resource terms (what ``--allow-large`` guards), beside its Config
text          the paper's real-text protocol: a Config class with ``quick()``/``full()`` presets,
              ``protocol(*, device, progress, store, workers, ray) -> dict`` and
              ``sweep_run()`` (what ``tdyn sweep P --kind text`` sweeps) — or ``None`` with a reason
claims        ``claims(*, quick, device, progress) -> list[figures.claims.ClaimResult]``: the paper's
              claims decided over seeds with their validity maps (``figures/<p>/claims.toml`` +
              ``figures.claims.registry_claims``; ``docs/claims.md``)
============  ===============================================================================

``missing`` maps an unfilled slot to the one-line reason it is not filled (transitional: a row
without a ``claims`` slot gets :data:`TRANSITIONAL`'s reason until its registry exists). Adding a paper means
writing its modules and calling :func:`register` (see ``docs/adding-a-paper.md``).

**Variants** are the Config's: ``Paper.variants`` lists ``Config.VARIANTS`` where the Config
declares them (:class:`theory.ParamsBase`); a row whose Config does not (yet) may pass
``variants=(...)`` itself. ``tdyn train P --variant V`` (and ``tdyn sweep``) build the config with
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

__all__ = ["Paper", "PAPERS", "SLOTS", "TRANSITIONAL", "get", "register", "paper_names"]

Ref = str | Callable[..., Any] | type
SLOTS = ("config", "systems", "problem", "sde", "train", "compare", "figures", "estimate", "text", "claims")
#: slots a row may still leave empty without a reason of its own (the reason given instead)
TRANSITIONAL = {"claims": "no claims registry yet (figures/<paper>/claims.toml)"}


class _Variants:
    """``Paper.variants``: the Config's ``VARIANTS`` where it declares them, else the tuple the row
    passed (a data descriptor: the dataclass's ``__init__`` stores the row's tuple through it;
    the Config is resolved only when the variants are read)."""

    def __set_name__(self, owner, name):
        self.stored = "_" + name

    def __get__(self, row, owner=None):
        if row is None:
            return ()  # the dataclass default
        declared = getattr(row.Config, "VARIANTS", None) if row.config is not None else None
        return tuple(declared) if declared else row.__dict__.get(self.stored, ())

    def __set__(self, row, value):
        row.__dict__[self.stored] = tuple(value)


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
    variants: tuple[str, ...] = _Variants()
    missing: Mapping[str, str] = field(default_factory=dict)
    #: CPU seconds of the quick `tdyn figures` (measured on an idle 2-core machine): `tdyn reproduce
    #: --jobs J` starts the longest papers first, so that no long paper is left running alone at the end
    quick_seconds: float = 0.0

    def __post_init__(self):
        todo = {k: v for k, v in TRANSITIONAL.items() if getattr(self, k) is None and k not in self.missing}
        if todo:
            object.__setattr__(self, "missing", {**self.missing, **todo})
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


# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------
register(Paper(
    name="scb",
    title="Sparse contextual bigrams: linear transformer, preconditioned l1-proximal SGD, two stages",
    spec="docs/papers/scb.md",
    config="theory.scb:SCBConfig",
    systems="theory.scb:systems",
    problem="theory.scb:problem",
    sde="theory.scb:minibatch_sde_reduced",  # docs/papers/scb.md §3.6: reduced state + off-manifold energies
    train="empirical.scb:run",
    compare="figures.scb:compare",
    figures="figures.scb.figures:FIGURES",
    estimate="theory.scb.config:estimate",
    claims="figures.scb.claims:claims",
    quick_seconds=210,
    variants=("preconditioned", "sgd", "softmax"),
    missing={"text": "the SCB paper's claims are about synthetic sparse contextual bigrams; it has no real-text protocol"},
))

register(Paper(
    name="scan-snap",
    title="Scan and snap: 1-layer transformer, scan then snap (T = infinity objective)",
    spec="docs/papers/scan_snap.md",
    config="theory.scan_snap:ScanSnapConfig",
    systems="theory.scan_snap:systems",
    problem="theory.scan_snap:problem",
    sde="theory.scan_snap.sde:sde",  # finite-T count-vector SGD on the symmetric subspace
    train="empirical.scan_snap.experiment:run",
    compare="figures.scan_snap.compare:compare",
    figures="figures.scan_snap.figures:FIGURES",
    estimate="theory.scan_snap.config:estimate",
    text="empirical.scan_snap.text:ScanSnapTextConfig",  # Figs. 7 and 10 on WikiText-2
    claims="figures.scan_snap.claims:claims",  # figures/scan_snap/claims.toml, decided over seeds
    quick_seconds=310,
    variants=("counts", "sequences"),
))

register(Paper(
    name="topic",
    title="Topic structure (LDA): masked-LM two-stage dynamics",
    spec="docs/papers/topic.md",
    config="theory.topic:TopicConfig",
    systems="theory.topic:systems",
    problem="theory.topic:problem",
    sde="theory.topic.sde:sde",  # stage 1 in the full (W, b) space, noise from one document's loss
    train="empirical.topic:run",
    compare="figures.topic:compare",
    figures="figures.topic.figures:FIGURES",
    estimate="theory.topic.config:estimate",
    text="empirical.topic.text:TopicTextConfig",  # LDA topics and embedding/attention ratios on WikiText-2
    claims="figures.topic.claims:claims",
    quick_seconds=335,
    variants=("stage1", "joint", "attention", "embedding"),
))

register(Paper(
    name="joma",
    title="JoMA: joint MLP/attention dynamics, invariants, entropy drop and bounce, hierarchy",
    spec="docs/papers/joma.md",
    config="theory.joma:JomaConfig",
    systems="theory.joma:systems",
    problem="theory.joma:problem",
    sde="theory.joma:minibatch_sde",
    train="empirical.joma:run",
    compare="figures.joma.compare:compare",
    figures="figures.joma.figures:FIGURES",
    estimate="theory.joma.config:estimate",
    text="empirical.joma.text:JomaTextConfig",  # Figs. 6 and 8 on WikiText-2
    claims="figures.joma.claims:claims",
    quick_seconds=460,
    variants=("fixed", "ce", "mixture", "probe", "hblt", "hier"),
))
