"""The paper table: every row fills every slot (or says why not), and time lives in the Config."""

import inspect
from collections.abc import Sequence

import numpy as np
import pytest

from figures.papers import PAPERS, SLOTS, Paper, get
from theory import ConfigError, ParamsBase, Problem


def test_every_slot_filled_or_explained():
    assert set(PAPERS) >= {"scb", "scan-snap", "topic", "joma"}
    for row in PAPERS.values():
        for slot in SLOTS:
            ref = getattr(row, slot)
            if ref is None:
                assert row.missing.get(slot), f"{row.name}: empty slot {slot} without a reason"
                with pytest.raises(ConfigError):
                    row.slot(slot)
            elif slot == "figures":  # a FIGURES sequence of figure functions
                assert row.slot(slot) and all(map(callable, row.slot(slot))), f"{row.name}.{slot}"
            else:
                assert callable(row.slot(slot)), f"{row.name}.{slot}"


def test_row_without_reason_is_refused():
    with pytest.raises(ValueError, match="sde"):
        Paper(name="x", title="", spec="", config=ParamsBase, systems=len, problem=len, train=len,
              compare=len, figures=len, sde=None)


def test_unknown_paper_and_variant():
    with pytest.raises(ConfigError, match="paper"):
        get("nope")
    with pytest.raises(ConfigError, match="variant"):
        get("scb").check_variant("nope")


#: a tiny run: the logging grid's last interval is shorter (10 is not a multiple of 3), so a slot that
#: builds its own grid (linspace, arange) instead of ``config.ode_times()`` shows up
TINY = ("steps=10", "log_every=3")
#: known defects, each with the fix it waits for; strict, so the test flips when the fix merges
KNOWN: dict[tuple[str, str | None, str], str] = {}


def _time_slots():
    for row in PAPERS.values():
        for variant in row.variants or (None,):
            for slot in ("problem", "sde", "train"):
                if getattr(row, slot) is None:
                    continue
                why = KNOWN.get((row.name, variant, slot))
                marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
                yield pytest.param(row.name, variant, slot, marks=marks, id=f"{row.name}-{variant}-{slot}")


def _times(row, slot, cfg) -> np.ndarray:
    if slot == "problem":
        problem = row.slot("problem")(cfg)
        assert isinstance(problem, Problem)
        return np.asarray(problem.t)
    if slot == "sde":
        _, t = row.slot("sde")(cfg)
        return np.asarray(t)
    traj = row.slot("train")(cfg, device="cpu", variant=row.train_variant(cfg), progress=False)
    return traj["time"].values


@pytest.mark.parametrize("name, variant, slot", list(_time_slots()))
def test_every_time_axis_is_the_configs(name, variant, slot):
    """For every variant: the problem's output times, the SDE's grid and a (tiny) training run's
    logged times are exactly ``config.ode_times()``: time lives in the Config and nowhere else."""
    row = get(name)
    cfg = row.make_config(TINY, variant=variant)
    steps = cfg.log_steps()
    assert steps[0] == 0 and steps[-1] == cfg.steps and np.all(np.diff(steps) > 0)
    try:
        times = _times(row, slot, cfg)
    except ConfigError as err:  # a slot that does not serve this variant says so, naming the variant
        assert err.field == "variant" and variant is not None and repr(variant) in str(err), err
        return
    np.testing.assert_array_equal(times, cfg.ode_times())


@pytest.mark.parametrize("name", list(PAPERS))
def test_slot_signatures(name):
    row = get(name)
    assert {"quick", "device"} <= set(inspect.signature(row.slot("compare")).parameters)
    train_params = set(inspect.signature(row.slot("train")).parameters)
    assert {"device", "variant", "progress", "checkpoint", "checkpoint_every", "resume"} <= train_params
    figures = row.slot("figures")
    # the figures slot: a sequence of figure functions fig_x(outdir | None, quick, *, device) -> data
    assert isinstance(figures, Sequence) and not isinstance(figures, str) and len(figures) > 0
    for fig in figures:
        params = list(inspect.signature(fig).parameters.values())
        positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert len(positional) >= 2, fig  # (outdir, quick)
        assert any(p.name == "device" and p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), fig


@pytest.mark.parametrize("name", ["scb", "topic"])
def test_solve_of_a_problem_records_the_full_config(name):
    import simulate
    from simulate.trajectory import config_of

    row = get(name)
    cfg = row.make_config()
    traj = simulate.solve(row.slot("problem")(cfg), backend="scipy")
    assert config_of(traj) == json_roundtrip(cfg.to_dict())


def json_roundtrip(d):
    import json

    from simulate.trajectory import jsonable

    return json.loads(json.dumps(jsonable(d)))


# ------------------------------------------------------------------------------------------------
# Variants: the Config's, bound before --set
# ------------------------------------------------------------------------------------------------
from dataclasses import dataclass  # noqa: E402

from theory.params import ALL_VARIANTS  # noqa: E402


@dataclass(frozen=True)
class _TwoVariants(ParamsBase):
    VARIANTS = {"plain": "one line", "fast": "another"}
    VARIANT_DEFAULTS = {ALL_VARIANTS: {"lr": 0.1}, "fast": {"lr": 1.0}}
    VARIANT_ONLY = {"boost": ("fast",)}

    variant: str = "plain"
    lr: float | None = None
    boost: float = 0.0
    steps: int = 4
    log_every: int = 2

    def ode_time(self, step):
        return float(step)


def _row(**kw):
    return Paper(name="two", title="", spec="", config=_TwoVariants, systems=len, problem=len, train=len,
                 compare=len, figures=len, missing={s: "test row" for s in ("sde", "estimate", "text")}, **kw)


def test_variants_come_from_the_config_where_it_declares_them():
    assert _row().variants == ("plain", "fast")
    assert _row(variants=("plain",)).variants == ("plain", "fast")  # the Config wins over a stale tuple
    legacy = Paper(name="old", title="", spec="", config=ParamsBase, systems=len, problem=len, train=len,
                   compare=len, figures=len, variants=("a", "b"),
                   missing={s: "test row" for s in ("sde", "estimate", "text")})
    assert legacy.variants == ("a", "b") and not legacy.config_has_variant  # a row still passing a tuple
    for row in PAPERS.values():
        declared = getattr(row.Config, "VARIANTS", None)
        if declared:
            assert row.variants == tuple(declared), row.name


def test_make_config_binds_the_variant_before_the_overrides():
    row = _row()
    cfg = row.make_config(["steps=6"], variant="fast")
    assert (cfg.variant, cfg.lr, cfg.steps) == ("fast", 1.0, 6)  # the variant's default, then --set
    assert row.make_config(["boost=2"], variant="fast").boost == 2.0  # a fast-only setting under fast
    with pytest.raises(ConfigError, match="^boost: "):
        row.make_config(["boost=2"])  # ... is ignored by the default variant
    assert row.make_config(["lr=0.5"], variant="fast").lr == 0.5
    base = row.make_config(["lr=0.3"])
    assert row.make_config(variant="fast", base=base).lr == 0.3  # an explicit setting survives the rebinding
    assert row.train_variant(cfg, "plain") == "fast"  # the train slot gets the config's own variant
    with pytest.raises(ConfigError, match="^variant: "):
        row.make_config(["variant=plain"], variant="fast")
    with pytest.raises(ConfigError, match="^variant: "):
        row.make_config(variant="nope")
