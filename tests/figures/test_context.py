"""figures.context.RunContext: the one carrier of a run's settings (immutable, validated, hashable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from figures.context import CPU_CORE_HOURS, OUT_DIR, RunContext
from theory import ConfigError


def test_equal_settings_are_equal_and_hash_equal_paths_as_strings():
    a = RunContext(quick=False, device="cpu", corpus=Path("/data/wt2"), store=Path("runs"), workers=2)
    b = RunContext(quick=False, device="cpu", corpus="/data/wt2", store="runs", workers=2)
    assert a == b and hash(a) == hash(b) and a.corpus == "/data/wt2" and a.store == "runs"
    assert a != b.replace(workers=3)
    with pytest.raises(AttributeError):
        a.workers = 4  # frozen


@pytest.mark.parametrize("changes, field", [({"workers": 0}, "workers"), ({"workers": 1.5}, "workers"),
                                            ({"cpu_core_hours": 0}, "cpu_core_hours"),
                                            ({"cpu_core_hours": -1.0}, "cpu_core_hours"),
                                            ({"cpu_core_hours": float("nan")}, "cpu_core_hours"),
                                            ({"cpu_core_hours": float("inf")}, "cpu_core_hours"),
                                            ({"cpu_core_hours": "many"}, "cpu_core_hours")])
def test_bad_settings_are_refused_naming_their_field(changes, field):
    with pytest.raises(ConfigError) as err:
        RunContext(**changes)
    assert err.value.field == field
    with pytest.raises(ConfigError):
        RunContext().replace(**changes)  # a copy is validated again


def test_of_puts_in_only_the_keywords_given():
    base = RunContext(quick=False, device="cuda", store="S")
    assert RunContext.of(base) is base
    assert RunContext.of(base, quick=None, device=None) is base
    assert RunContext.of(base, quick=True) == RunContext(quick=True, device="cuda", store="S")
    assert RunContext.of(None, device="cpu") == RunContext(device="cpu")
    assert RunContext.of(base, progress=False).progress is False


def test_sweep_settings_store_root_or_the_protocols_default(tmp_path):
    ctx = RunContext(store=tmp_path, workers=3, ray="auto")
    assert ctx.sweep("claims/scb/x", "default") == {"store": tmp_path / "claims/scb/x", "workers": 3, "ray": "auto"}
    assert RunContext().sweep("joma", tmp_path / "d") == {"store": tmp_path / "d", "workers": 1, "ray": None}
    assert RunContext().sweep("joma") == {"store": None, "workers": 1, "ray": None}


def test_outdir_and_corpus_defaults():
    from empirical.text import default_corpus_dir

    assert RunContext().paper_outdir("scan_snap") == OUT_DIR / "scan_snap"
    assert RunContext(outdir="elsewhere").paper_outdir("scan_snap") == Path("elsewhere")
    assert RunContext().corpus_dir() == default_corpus_dir()
    assert RunContext(corpus="wikitext-103").corpus_dir() == "wikitext-103"


def test_the_library_reads_no_setting_from_the_environment(monkeypatch):
    monkeypatch.setenv("TDYN_CPU_CORE_HOURS", "1000")  # the CLI's variable: only the CLI reads it
    assert RunContext().cpu_core_hours == CPU_CORE_HOURS == 2.0
