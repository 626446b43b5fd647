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
    assert [(c.source, c.metadata.get("tdyn")) for c in on_disk.cells] == [
        (c.source, c.metadata.get("tdyn")) for c in mod.build().cells]


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
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        assert _shows(cell) == cell.metadata["tdyn"]["shows"], (cell.source[:80], cell.outputs)
    sections = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert len(sections) == 7
    # every section is followed by a code cell of its own
    kinds = [("section" if c.cell_type == "markdown" and c.source.startswith("## ") else c.cell_type) for c in nb.cells]
    for i, k in enumerate(kinds):
        if k == "section":
            nxt = next((x for x in kinds[i + 1:] if x != "markdown"), None)
            assert nxt == "code", f"{nb.cells[i].source.splitlines()[0]} shows nothing"


def _shows(cell) -> str | None:
    """What an executed cell shows: ``figure`` (an inline PNG), ``table`` (an HTML table), ``text``
    (printed or returned text that is not an object's bare repr), else ``None``."""
    data = {}
    for o in cell.outputs:
        if o.output_type in ("execute_result", "display_data"):
            data.update(o.data)
        elif o.output_type == "stream" and o.text.strip():
            data.setdefault("text/plain", "")
            data["text/plain"] += o.text
    if "image/png" in data and len(data["image/png"]) > 1000:
        return "figure"
    if "<table" in data.get("text/html", "") and data["text/html"].count("<tr") >= 2:
        return "table"
    text = data.get("text/plain", "").strip()
    if text and not (text.startswith("<") and " at 0x" in text) and not text.startswith("<Figure"):
        return "text"
    return None
