"""The machinery every paper's real-text figures and claims share: the protocol config
of a paper (its row's ``text`` slot, quick or full, on a corpus), :func:`results` (each protocol
runs at most once per process and setting, its runs kept as sweep cells in a store), the regime
line of a real-text claim and whether a corpus is present. The figures and claims themselves are
the papers': :mod:`figures.scan_snap.text`, :mod:`figures.joma.text`, :mod:`figures.topic.text`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from empirical import text
from theory.errors import ConfigError, check_choice

from . import progress as bars
from .context import RunContext

__all__ = ["text_papers", "config_for", "check_corpus_fits", "results", "runs_dir", "text_regime", "corpus_available",
           "no_corpus_claims", "NO_CORPUS", "RUNS_DIR"]

#: why a real-text claim is untested without a corpus, and how to get one
NO_CORPUS = ("no corpus: the real-text claims train on WikiText-2 (Merity et al. 2016, the raw "
             "wiki.train/valid/test.tokens files); put it in ../shared/data/wikitext-2 or pass --corpus DIR")


def text_papers() -> tuple[str, ...]:
    """The papers whose row fills the ``text`` slot (a real-text protocol)."""
    from .papers import PAPERS

    return tuple(name for name, row in PAPERS.items() if row.text is not None)


def config_for(paper: str, quick: bool, corpus: str | None = None):
    """The protocol config of ``paper`` (its row's ``text`` slot; quick or full preset) on
    ``corpus`` (None: the default)."""
    from .papers import get

    check_choice("paper", paper, text_papers())
    cls = get(paper).slot("text")
    return (cls.quick if quick else cls.full)(corpus=str(text.check_corpus(corpus)))


_CACHE: dict[tuple, dict[str, Any]] = {}
#: the default store of a figure's runs: this folder under the figure's outdir
RUNS_DIR = "wikitext_runs"


def runs_dir(outdir) -> Path | None:
    """The default store of a figure's runs: :data:`RUNS_DIR` under its outdir (None: none)."""
    return None if outdir is None else Path(outdir) / RUNS_DIR


def results(paper: str, ctx: RunContext, *, store: str | Path | None = None) -> dict[str, Any]:
    """The protocol's results, run once per process and setting (paper, preset, device, corpus of
    ``ctx``). Its runs are sweep cells kept in a store: ``ctx.store/<paper>`` when the context names
    a store root, else ``store`` (the figures pass ``<outdir>/wikitext_runs``), else a temporary
    folder; the store, workers and Ray change where runs are computed, never their numbers."""
    key = (paper, ctx.quick, ctx.device, str(text.check_corpus(ctx.corpus)))
    if key not in _CACHE:
        cfg = config_for(paper, ctx.quick, key[3])
        opts = ctx.sweep(paper, store)
        bar = bars.cell_bar if ctx.progress else None  # the cells' bar (drawn while figures.progress is enabled)
        _CACHE[key] = {"config": cfg, **cfg.protocol(device=ctx.device, progress=not ctx.quick, bar=bar, **opts)}
    return _CACHE[key]


def no_corpus_claims(registry, quick: bool = True, reason: str = NO_CORPUS) -> list:
    """Every claim of a real-text ``registry`` as **untested** with ``reason`` (no corpus): the
    claims stay in the tally and the table, never silently dropped."""
    from .claims import untested

    return [untested(c, reason, quick=quick) for c in registry.claims]


def text_regime(res, extra: str = "") -> str:
    """The regime line of a real-text claim: corpus, sizes, ``extra``, training time."""
    c = res["config"]
    return (f"WikiText-2 (train wiki.test.tokens, validate wiki.valid.tokens), vocab {c.vocab_size}, emsize {c.emsize}, "
            f"{c.steps} minibatches{extra}; {res['seconds']:.0f} s of training")


def check_corpus_fits(corpus, quick: bool | None = None, papers=None) -> None:
    """``ConfigError('corpus', ...)`` unless ``corpus`` can feed the real-text protocols of ``papers``
    (default: every paper that has one; quick, full, or both when ``quick`` is None): its files
    (:func:`empirical.text.check_corpus`), then each protocol's own check (its streams, and LDA's
    inputs for the topic paper), before any work."""
    text.check_corpus(corpus)
    for paper in text_papers():
        if papers is not None and paper not in papers:
            continue
        for q in (True, False) if quick is None else (quick,):
            config_for(paper, q, corpus).check_corpus()


def corpus_available(corpus=None) -> bool:
    """Whether the corpus (default: ``../shared/data/wikitext-2``; the CLI's ``--corpus`` is ``ctx.corpus``) is
    usable. An explicit ``--corpus`` that is missing is refused up front by the CLI (exit 2); a
    missing *default* corpus only skips the real-text figures and claims (with a note)."""
    try:
        text.check_corpus(corpus)
    except ConfigError:
        return False
    return True
