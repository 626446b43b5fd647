"""README and help true and complete: every option of every command has help text,
the papers and their variants are listed in help, near-miss names get a "did you mean", every
flag the README shows exists, the README's output folder is where figures go, the cluster extra is
installable as the README says, and the API reference builds (pdoc)."""

import re
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from figures.cli import main
from figures.papers import PAPERS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _commands(cmd=main, path=("tdyn",)):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))


def test_every_command_and_option_has_help_text():
    missing = []
    for path, cmd in _commands():
        if not (cmd.help or "").strip():
            missing.append(" ".join(path))
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden and not (p.help or "").strip():
                missing.append(f"{' '.join(path)} {p.opts[0]}")
    assert not missing, missing


def test_help_lists_papers_and_variants():
    for path, cmd in _commands():
        if any(isinstance(p, click.Argument) and p.name == "paper" for p in cmd.params):
            text = CliRunner().invoke(main, [*path[1:], "-h"]).output
            for row in PAPERS.values():
                assert row.name in text, (path, row.name)
                assert all(v in text for v in row.variants), (path, row.name)


def test_top_level_help_lists_the_papers():
    text = CliRunner().invoke(main, ["--help"]).output
    section = text.split("Papers (PAPER):")[1]
    assert [ln.split()[0] for ln in section.splitlines() if ln.startswith("  ") and not ln.startswith("   ")] \
        == list(PAPERS)


def test_sweep_help_lists_every_config_field_of_every_paper():
    import dataclasses

    text = CliRunner().invoke(main, ["sweep", "-h"]).output
    listed = " ".join(text.split("is a field of the paper's config:")[1].split())
    for row in PAPERS.values():
        part = listed.split(f"{row.name}: ")[1]
        names = [f.name for f in dataclasses.fields(row.Config)]
        assert part.startswith(", ".join(names)), (row.name, part[:200])


def test_variant_help_is_sentences():
    for command in ("train", "sweep"):
        text = " ".join(CliRunner().invoke(main, [command, "-h"]).output.split())
        last = [r for r in PAPERS.values() if r.variants][-1].variants[-1]  # the help's last variant
        assert f"{last}. " in text and f"{last} Applied" not in text and f"{last} (train" not in text


def test_constraints_pin_each_package_once():
    names = [ln.split("==")[0].lower() for ln in (ROOT / "constraints.txt").read_text().splitlines() if ln.strip()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("args, line", [
    (["simulate", "scan_snap"], "error: paper: unknown paper 'scan_snap' (did you mean 'scan-snap'?)"),
    (["derive", "jomaa"], "error: paper: unknown paper 'jomaa' (did you mean 'joma'?)"),
    (["train", "scb", "--variant", "precondition", "--set", "steps=1"],
     "error: variant: scb: must be one of ('preconditioned', 'sgd', 'softmax'), got 'precondition' "
     "(did you mean 'preconditioned'?)"),
])
def test_near_miss_names_get_a_did_you_mean(args, line):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2
    assert res.stderr.strip().startswith(line), res.stderr


def test_no_suggestion_for_a_far_name():
    res = CliRunner().invoke(main, ["derive", "nonsense"])
    assert "did you mean" not in res.stderr and res.stderr.startswith("error: paper: unknown paper 'nonsense'")


def _readme_commands() -> dict[str, set[str]]:
    block = README.split("## The `tdyn` command")[1].split("```")[1]
    flags: dict[str, set[str]] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"\s*tdyn ([\w-]+)", line)
        if m:
            current = m.group(1)
        if current:
            flags.setdefault(current, set()).update(re.findall(r"(--[a-z][a-z-]*)", line.split("#")[0]))
    return flags


def test_every_flag_in_the_readme_exists_and_every_command_is_shown():
    shown = _readme_commands()
    assert set(shown) == set(main.commands), set(main.commands) ^ set(shown)
    for name, flags in shown.items():
        cmd = main.commands[name]
        known = {o for p in cmd.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
        assert flags <= known, (name, flags - known)


def test_readme_output_folder_is_where_figures_go():
    from figures.core import OUT_DIR

    for row in PAPERS.values():
        folder = OUT_DIR / row.module
        assert f"`figures/out/{folder.name}/`" in README, folder
    help_text = CliRunner().invoke(main, ["figures", "-h"]).output
    assert "--outdir" in help_text and "figures/out/scan_snap" in " ".join(help_text.split())


def test_cluster_extra_is_installable_as_the_readme_says():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("ray") for d in project["optional-dependencies"]["cluster"])
    assert 'pip install -c constraints.txt -e ".[cluster]"' in README
    assert "pip install tdyn[" not in README  # tdyn is not on PyPI


def test_files_the_repository_cites_exist():
    for f in ("Makefile", "pyproject.toml", "README.md"):
        text = (ROOT / f).read_text()
        assert "DEVELOPERS.md" not in text, f
    for ref in re.findall(r"`((?:docs|figures|theory|tests)/[\w./-]+\.(?:md|py|mplstyle))`", README):
        assert (ROOT / ref).exists(), ref


@pytest.mark.slow
def test_api_reference_builds(tmp_path):
    """``make docs`` (docs/build_api.py): pdoc writes a page per module, the exporters documented."""
    pytest.importorskip("pdoc")
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_api", ROOT / "docs" / "build_api.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    index = mod.build(tmp_path)
    assert index.exists()
    page = (tmp_path / "theory" / "export.html").read_text()
    assert "load_system" in page and "to_latex" in page
    assert (tmp_path / "figures" / "style.html").exists()
