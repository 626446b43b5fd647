"""docs/tutorial.ipynb runs top to bottom (it cannot rot): executed with nbclient on this Python, and
it is exactly what docs/make_tutorial.py writes (the cells are edited there)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"


def test_notebook_is_the_script_output():
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("make_tutorial", ROOT / "docs" / "make_tutorial.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    on_disk = nbformat.read(NOTEBOOK, as_version=4)
    assert [c.source for c in on_disk.cells] == [c.source for c in mod.build().cells]


def test_tutorial_notebook_executes(tmp_path, monkeypatch):
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's packages
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute(cwd=str(tmp_path))  # raises CellExecutionError at the first failing cell
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code")  # every cell ran
