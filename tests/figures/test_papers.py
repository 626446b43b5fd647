"""The paper table: every row fills every slot (or says why not), and time lives in the Config."""

import dataclasses

import numpy as np
import pytest

from figures import contract
from figures.papers import PAPERS, Paper, get
from theory import ConfigError, ParamsBase, Problem


def _rows():
    """Every row of the table and the worked example (tests/tiny, a plugin package's row)."""
    from tiny.paper import PAPER as TINY_ROW

    return [*PAPERS.values(), *([TINY_ROW] if TINY_ROW.name not in PAPERS else [])]


def test_the_table_is_the_entry_points():
    """tdyn's own papers are plugins too: the table holds every installed ``tdyn.papers`` row."""
    from importlib.metadata import entry_points

    names = [ep.name for ep in entry_points(group="tdyn.papers")]
    assert {"scb", "scan-snap", "topic", "joma"} <= set(names) <= set(PAPERS) | {"tiny"}


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r.name)
def test_every_slot_filled_or_explained(row):
    contract.check_slots(row)


def test_a_row_breaking_the_contract_is_caught():
    """The contract can fail: a row whose train slot lacks the checkpoint keywords, one whose
    empty slot resolves, and a slot that builds its own time grid."""
    row = get("scb")
    with pytest.raises(contract.ContractError, match="train does not take"):
        contract.check_slots(dataclasses.replace(row, train=lambda config, *, device, variant, progress: None))
    own_grid = dataclasses.replace(row, problem=lambda cfg: dataclasses.replace(
        row.slot("problem")(cfg), t=np.linspace(0.0, cfg.ode_times()[-1], len(cfg.ode_times()))))
    with pytest.raises(contract.ContractError, match="not config.ode_times"):
        contract.check_time_axis(own_grid, None, "problem")


@pytest.mark.parametrize("row, variant", [
    pytest.param(row, variant, id=f"{row.name}-{variant}")
    for row in _rows() if row.train_seeds is not None for variant in (row.variants or (None,))])
def test_a_batched_train_slot_equals_the_per_seed_runs(row, variant):
    contract.check_train_seeds(row, variant)


def test_a_batched_train_slot_that_differs_is_caught():
    """The check can fail: a train_seeds whose seeds are shifted by one."""
    from empirical.scb.l1 import train_seeds

    row = get("scb")
    shifted = dataclasses.replace(row, train_seeds=lambda cfg, *, seeds, device: train_seeds(
        cfg, seeds=[s + 1 for s in seeds], device=device).assign_coords(seed=list(seeds)))
    with pytest.raises(contract.ContractError, match="differs from the train slot"):
        contract.check_train_seeds(shifted, None)


def test_row_without_reason_is_refused():
    with pytest.raises(ValueError, match="sde"):
        Paper(name="x", title="", spec="", config=ParamsBase, systems=len, problem=len, train=len,
              compare=len, figures=len, sde=None)


def test_unknown_paper_and_variant():
    with pytest.raises(ConfigError, match="paper"):
        get("nope")
    with pytest.raises(ConfigError, match="variant"):
        get("scb").check_variant("nope")


@pytest.mark.parametrize("row, variant, slot", [
    pytest.param(row, variant, slot, id=f"{row.name}-{variant}-{slot}")
    for row in _rows() for variant, slot in contract.time_cases(row)])
def test_every_time_axis_is_the_configs(row, variant, slot):
    """For every variant: the problem's output times, the SDE's grid and a (tiny) training run's
    logged times are exactly ``config.ode_times()``: time lives in the Config and nowhere else."""
    contract.check_time_axis(row, variant, slot)


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r.name)
def test_derivation_evaluates(row):
    contract.check_derivation(row)


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
                 compare=len, figures=len, missing={s: "test row" for s in ("sde", "estimate", "text", "claims")}, **kw)


def test_variants_come_from_the_config():
    assert _row().variants == ("plain", "fast")
    plain = Paper(name="old", title="", spec="", config=ParamsBase, systems=len, problem=len, train=len,
                  compare=len, figures=len, missing={s: "test row" for s in ("sde", "estimate", "text", "claims")})
    assert plain.variants == () and not plain.config_has_variant
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


def test_reading_the_table_imports_no_plotting_or_training_library():
    """The table and the rows are light: a tool listing papers pays for sympy, not for matplotlib,
    torch or jax (the rows name their slots as strings; the packages' re-exports load on use)."""
    import subprocess
    import sys

    code = ("import sys, figures.papers as P; [r.variants for r in P.PAPERS.values()]; "
            "print(sorted(m for m in ('matplotlib', 'torch', 'jax') if m in sys.modules), len(P.PAPERS))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded, count = res.stdout.rsplit(" ", 1)
    assert loaded == "[]" and int(count) >= 4, res.stdout
