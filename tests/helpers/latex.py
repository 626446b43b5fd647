"""Compile LaTeX with pdflatex and read the PDF back with pdftotext (imported as ``helpers.latex``;
the tests that use it skip where the TeX tools are missing: ``.ci/run`` installs them)."""

import shutil
import subprocess

#: what pdflatex makes of ``|``, ``<``, ``>`` in text mode without T1 fonts
GARBLED = ("—", "¡", "¿")


def have_tex(*packages: str) -> bool:
    """pdflatex, pdftotext and each LaTeX ``package`` (``booktabs``) installed."""
    if not all(shutil.which(t) for t in ("pdflatex", "pdftotext", "kpsewhich")):
        return False
    return all(subprocess.run(["kpsewhich", f"{p}.sty"], capture_output=True).returncode == 0 for p in packages)


def pdf_text(tex: str, tmp_path, stem: str = "d") -> str:
    """The document ``tex`` compiled in ``tmp_path`` and read back by pdftotext (whitespace collapsed);
    a failed compilation fails the test with the end of pdflatex's log."""
    (tmp_path / f"{stem}.tex").write_text(tex)
    res = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{stem}.tex"], cwd=tmp_path,
                         capture_output=True, timeout=300)
    assert res.returncode == 0, res.stdout.decode(errors="replace")[-3000:]
    subprocess.run(["pdftotext", "-enc", "UTF-8", f"{stem}.pdf", f"{stem}.txt"], cwd=tmp_path, check=True, timeout=60)
    return " ".join((tmp_path / f"{stem}.txt").read_text(encoding="utf-8").split())
