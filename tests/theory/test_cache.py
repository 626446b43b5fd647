"""The on-disk derive cache (theory/cache.py): same output as a fresh derivation, keyed by the
theory source, outside the repository, and a corrupt entry is rebuilt, never trusted."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from figures.cli import main
from theory import cache, scb

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def cdir(tmp_path, monkeypatch):
    monkeypatch.setenv("TDYN_CACHE_DIR", str(tmp_path / "c"))
    return tmp_path / "c"


def _derive(*extra):
    res = CliRunner().invoke(main, ["derive", "joma", "--format", "json", *extra])
    assert res.exit_code == 0, res.output
    return res.stdout


def _entries(cdir):
    return sorted((cdir / "derive").glob("*.json"))


def test_cached_output_equals_fresh_and_lives_in_the_cache_dir(cdir):
    fresh = _derive("--no-cache")
    assert not cdir.exists()  # --no-cache neither reads nor writes
    first = _derive()
    (entry,) = _entries(cdir)
    assert REPO not in entry.parents
    assert _derive() == first == fresh
    assert json.loads(entry.read_text())["payload"] == fresh


@pytest.mark.parametrize("damage", ["garbage", "tampered", "empty"])
def test_corrupt_entry_is_rebuilt_not_trusted(cdir, damage):
    fresh = _derive()
    (entry,) = _entries(cdir)
    doc = json.loads(entry.read_text())
    if damage == "garbage":
        entry.write_bytes(b"\x00{not json")
    elif damage == "tampered":  # valid JSON, payload changed, checksum kept
        doc["payload"] = doc["payload"].replace("theorem2", "forged")
        entry.write_text(json.dumps(doc))
    else:
        entry.write_text("")
    assert _derive() == fresh
    assert json.loads(entry.read_text())["payload"] == fresh  # rewritten with a valid checksum


def test_key_follows_the_theory_source(cdir, monkeypatch):
    _derive()
    monkeypatch.setattr(cache, "_source_digest", lambda: "another theory source")
    _derive()
    assert len(_entries(cdir)) == 2


def test_cached_systems_decorator_round_trips_equivalent_systems(cdir):
    calls = []

    @cache.cached_systems
    def systems(config=None):
        calls.append(1)
        return scb.systems(config)

    cfg = scb.SCBConfig()
    a = systems(cfg)
    b = systems(cfg)
    assert len(calls) == 1
    assert all(x.equivalent(y) for x, y in zip(a, b, strict=True))
    (entry,) = sorted((cdir / "systems").glob("*.json"))
    entry.write_text('{"sha256": "0", "payload": []}')
    c = systems(cfg)
    assert len(calls) == 2 and all(x.equivalent(y) for x, y in zip(a, c, strict=True))
