"""theory/refs.py: one resolve_ref for every "module:attribute" name (paper rows, sweep cells)."""

import pytest

from theory.errors import ConfigError
from theory.refs import resolve_ref


def test_resolves_module_attributes_and_dotted_paths():
    import simulate.trajectory
    from theory.params import ParamsBase

    assert resolve_ref("simulate.trajectory:jsonable") is simulate.trajectory.jsonable
    assert resolve_ref("theory.params:ParamsBase.preset") == ParamsBase.preset
    assert resolve_ref(len) is len  # objects given directly pass through


@pytest.mark.parametrize("ref", ["simulate.trajectory", ":jsonable", "simulate.trajectory:"])
def test_malformed_ref_names_the_field(ref):
    with pytest.raises(ConfigError, match="module:attribute"):
        resolve_ref(ref)


def test_missing_targets_raise_the_import_errors():
    with pytest.raises(ModuleNotFoundError):
        resolve_ref("no_such_module_xyz:f")
    with pytest.raises(AttributeError):
        resolve_ref("simulate.trajectory:no_such_function")


def test_the_paper_table_and_the_sweep_runner_share_it():
    from empirical import sweeps
    from figures import papers

    assert papers.resolve_ref is resolve_ref and sweeps.resolve_ref is resolve_ref
    assert not hasattr(papers, "_resolve") and not hasattr(sweeps, "_resolve")


def test_a_named_field_turns_an_unresolvable_reference_into_a_config_error():
    import pytest

    from theory.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        resolve_ref("json:no_such_function", "claims.x.statistic")
    assert err.value.field == "claims.x.statistic" and "cannot resolve 'json:no_such_function'" in str(err.value)
    with pytest.raises(ConfigError, match="^sampler: ") as err:
        resolve_ref("no_such_module_xyz:f", "sampler")
    with pytest.raises(ModuleNotFoundError):  # without a field: the import error itself (a programming error)
        resolve_ref("no_such_module_xyz:f")
    import json

    assert resolve_ref("json:dumps", "any") is json.dumps
