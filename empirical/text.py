"""The real-text pipeline shared by every paper that trains on WikiText.

Read top to bottom: tokeniser -> vocabulary -> corpus (train/validation split) -> streams and
bptt chunks -> masked-LM corruption.

* **Tokeniser** — torchtext's ``basic_english`` (the official Scan & Snap and JoMA code use it,
  docs/papers/scan_snap.md §5.6, docs/papers/joma.md "Fig. 6"): lower-case, split off ``' . , ( ) ! ?``,
  drop ``" ; :`` and ``<br />``, split on white space. ``<unk>`` of the ``.tokens`` files survives.
* **Vocabulary** — built on the *training* split only, most frequent first (ties alphabetical, as
  torchtext's ``build_vocab_from_iterator``), ``<unk>`` at id 0, capped at ``vocab_size`` entries
  (``<unk>`` included); every other word maps to ``<unk>``.
* **Split** — only the validation and test files of WikiText-2 exist locally (no train file; see
  the corpus README), so by default we **train on ``wiki.test.tokens`` and validate on
  ``wiki.valid.tokens``** (:data:`TRAIN_FILE`, :data:`VALID_FILE`). Each non-empty line's tokens are
  concatenated into one id stream, as the PyTorch word-language-model tutorial the official code
  uses (no ``<eos>``).
* **Streams** — :func:`batchify` cuts the id stream into ``B`` equal streams, shape ``(B, L)``
  (batch-first; the tutorial's ``(L, B)`` transposed); :func:`chunk` ``i`` is columns
  ``[i*bptt, (i+1)*bptt)`` as input and the same shifted by one as target. The tutorial's short
  last chunk is dropped, so every chunk has exactly ``bptt`` positions.
* ``--corpus wikitext-103`` loads WikiText-103 (train / validation) through the Hugging Face
  ``datasets`` package when it is installed; the default path never touches the network.

Bad input raises :class:`theory.errors.ConfigError` naming the field (``corpus``, ``vocab_size``,
``bptt``, ``batch_size``); the CLI prints it as one line and exits 2.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from theory.errors import ConfigError

__all__ = ["basic_english", "Vocab", "Corpus", "load_corpus", "resolve_corpus", "batchify", "chunk",
           "num_chunks", "mask_tokens", "default_corpus_dir", "check_corpus",
           "TRAIN_FILE", "VALID_FILE", "UNK"]

UNK = "<unk>"
TRAIN_FILE = "wiki.test.tokens"
VALID_FILE = "wiki.valid.tokens"
HF_CORPORA = {"wikitext-103": ("wikitext", "wikitext-103-v1"), "wikitext-2-hf": ("wikitext", "wikitext-2-v1")}

# torchtext.data.utils._basic_english_normalize, verbatim patterns and replacements
_PATTERNS = [(re.compile(p), r) for p, r in (
    (r"\'", " '  "), (r"\"", ""), (r"\.", " . "), (r"<br \/>", " "), (r",", " , "), (r"\(", " ( "),
    (r"\)", " ) "), (r"\!", " ! "), (r"\?", " ? "), (r"\;", " "), (r"\:", " "), (r"\s+", " "))]


def basic_english(line: str) -> list[str]:
    """torchtext's ``basic_english`` tokeniser: lower-case, regex normalise, split on spaces."""
    line = line.lower()
    for pattern, repl in _PATTERNS:
        line = pattern.sub(repl, line)
    return line.split()


# ------------------------------------------------------------------------------------------------
# Vocabulary
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Vocab:
    """``itos[i]`` is the word of id ``i``; id 0 is ``<unk>``; unknown words map to 0."""

    itos: tuple[str, ...]

    @classmethod
    def build(cls, lines: Iterable[list[str]], vocab_size: int) -> "Vocab":
        """Most frequent words of ``lines`` (ties alphabetical), ``<unk>`` first, ``vocab_size``
        entries at most (``<unk>`` included)."""
        check_vocab_size(vocab_size)
        counts = Counter(tok for toks in lines for tok in toks)
        counts.pop(UNK, None)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return cls((UNK,) + tuple(w for w, _ in ranked[: vocab_size - 1]))

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def stoi(self) -> dict[str, int]:
        return {w: i for i, w in enumerate(self.itos)}

    def encode(self, tokens: Sequence[str]) -> list[int]:
        stoi = self.stoi
        return [stoi.get(t, 0) for t in tokens]


def check_vocab_size(vocab_size: int) -> None:
    if int(vocab_size) < 2:
        raise ConfigError("vocab_size", f"must be >= 2 (<unk> plus at least one word), got {vocab_size}")


# ------------------------------------------------------------------------------------------------
# Corpus
# ------------------------------------------------------------------------------------------------
def default_corpus_dir() -> Path:
    """``../shared/data/wikitext-2`` relative to the repository root (not the working directory)."""
    return (Path(__file__).resolve().parent.parent / ".." / "shared" / "data" / "wikitext-2").resolve()


def resolve_corpus(corpus: str | Path | None = None) -> str | Path:
    """``corpus`` itself, else :func:`default_corpus_dir` (the CLI's ``--corpus`` travels in a
    :class:`figures.context.RunContext` to the protocols' configs)."""
    return corpus if corpus is not None else default_corpus_dir()


def check_corpus(corpus: str | Path | None = None) -> str | Path:
    """Validate a corpus argument without tokenising it: a directory holding non-empty
    :data:`TRAIN_FILE` and :data:`VALID_FILE`, or a name in :data:`HF_CORPORA` with ``datasets``
    installed. Returns the resolved corpus; raises ``ConfigError('corpus', ...)``."""
    corpus = resolve_corpus(corpus)
    if str(corpus) in HF_CORPORA:
        try:
            import datasets  # noqa: F401
        except ImportError:
            raise ConfigError("corpus", f"{corpus} needs the Hugging Face 'datasets' package "
                                        "(pip install datasets); or give a WikiText directory") from None
        return str(corpus)
    path = Path(corpus)
    if not path.is_dir():
        raise ConfigError("corpus", f"no such directory: {path} (give --corpus DIR with {TRAIN_FILE} and {VALID_FILE})")
    for name in (TRAIN_FILE, VALID_FILE):
        f = path / name
        if not f.is_file():
            raise ConfigError("corpus", f"{path} has no {name}")
        try:
            content = f.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ConfigError("corpus", f"{f} is not UTF-8 text (byte {err.start}: {err.reason})") from None
        except OSError as err:
            raise ConfigError("corpus", f"cannot read {f} ({err.strerror or err})") from None
        if not content.strip():
            raise ConfigError("corpus", f"{f} is empty")
    return path


@dataclass(frozen=True)
class Corpus:
    """Token ids of the training and validation text (1-D int64) and the vocabulary.
    ``lines_train`` keeps the tokenised training lines (paragraphs; the topic model's documents)."""

    train: torch.Tensor
    valid: torch.Tensor
    vocab: Vocab
    source: str
    lines_train: tuple[tuple[str, ...], ...] = ()


def _read_lines(corpus: str | Path) -> tuple[list[str], list[str], str]:
    corpus = check_corpus(corpus)
    if str(corpus) in HF_CORPORA:  # pragma: no cover - needs the network and `datasets`
        import datasets

        ds = datasets.load_dataset(*HF_CORPORA[str(corpus)])
        return list(ds["train"]["text"]), list(ds["validation"]["text"]), f"{corpus} (HF train / validation)"
    path = Path(corpus)
    read = lambda name: (path / name).read_text(encoding="utf-8").splitlines()  # noqa: E731
    return read(TRAIN_FILE), read(VALID_FILE), f"{path} (train {TRAIN_FILE}, validate {VALID_FILE})"


def load_corpus(corpus: str | Path | None = None, *, vocab_size: int, max_train_tokens: int | None = None,
                texts: tuple[Sequence[str], Sequence[str]] | None = None) -> Corpus:
    """Tokenise the training and validation text, build the capped vocabulary on training text,
    and encode both. ``texts=(train_lines, valid_lines)`` bypasses the files (tests, in-memory
    corpora). ``max_train_tokens`` keeps the first tokens of the training stream (quick runs)."""
    check_vocab_size(vocab_size)
    if texts is None:
        train_lines, valid_lines, source = _read_lines(corpus)
    else:
        train_lines, valid_lines = texts
        source = "in-memory"
    tok_train = [t for t in (basic_english(s) for s in train_lines) if t]
    tok_valid = [t for t in (basic_english(s) for s in valid_lines) if t]
    if not tok_train or not tok_valid:
        raise ConfigError("corpus", f"{source}: no tokens in the {'training' if not tok_train else 'validation'} text")
    vocab = Vocab.build(tok_train, vocab_size)
    stoi = vocab.stoi
    ids = lambda lines: torch.tensor([stoi.get(t, 0) for toks in lines for t in toks], dtype=torch.long)  # noqa: E731
    train = ids(tok_train)
    if max_train_tokens is not None:
        train = train[: int(max_train_tokens)]
    return Corpus(train, ids(tok_valid), vocab, source, tuple(tuple(t) for t in tok_train))


# ------------------------------------------------------------------------------------------------
# Streams and bptt chunks
# ------------------------------------------------------------------------------------------------
def batchify(ids: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Cut a 1-D id stream into ``batch_size`` contiguous streams: ``(batch_size, L)``,
    ``L = len(ids) // batch_size`` (the remainder is dropped), stream ``b`` = ``ids[b L:(b+1) L]``."""
    if int(batch_size) < 1:
        raise ConfigError("batch_size", f"must be >= 1, got {batch_size}")
    L = ids.numel() // batch_size
    if L < 2:
        raise ConfigError("corpus", f"{ids.numel()} tokens are too few for {batch_size} streams")
    return ids[: L * batch_size].view(batch_size, L).contiguous()


def num_chunks(streams: torch.Tensor, bptt: int) -> int:
    """Number of full bptt chunks of ``streams`` (inputs need ``bptt + 1`` columns incl. the target)."""
    check_bptt(bptt)
    n = (streams.shape[1] - 1) // bptt
    if n < 1:
        raise ConfigError("bptt", f"{bptt} is longer than the streams ({streams.shape[1]} tokens each)")
    return n


def check_bptt(bptt: int) -> None:
    if int(bptt) < 2:
        raise ConfigError("bptt", f"must be >= 2, got {bptt}")


def chunk(streams: torch.Tensor, i: int, bptt: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunk ``i`` (0-based, taken modulo :func:`num_chunks`): input ``(B, bptt)`` = columns
    ``[i bptt, (i+1) bptt)``, target = the same shifted right by one column."""
    i = int(i) % num_chunks(streams, bptt)
    s = i * bptt
    return streams[:, s: s + bptt], streams[:, s + 1: s + 1 + bptt]


# ------------------------------------------------------------------------------------------------
# Masked-LM corruption (docs/papers/topic.md §1.2, BERT style)
# ------------------------------------------------------------------------------------------------
def mask_tokens(x: torch.Tensor, mask_id: int, vocab_size: int, generator: torch.Generator, *,
                p_mask: float = 0.15, p_keep: float = 0.1, p_random: float = 0.1
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Select each position with probability ``p_mask``; a selected position becomes ``mask_id``
    w.p. ``1 - p_keep - p_random``, a uniform random word id (``1..vocab_size-1``) w.p.
    ``p_random``, and stays w.p. ``p_keep``. Returns ``(corrupted, labels)`` with labels ``-100``
    at unselected positions (ignored by ``cross_entropy``)."""
    u = torch.rand(x.shape, generator=generator, device=x.device)
    selected = u < p_mask
    v = torch.rand(x.shape, generator=generator, device=x.device)
    rnd = torch.randint(1, vocab_size, x.shape, generator=generator, device=x.device)
    out = x.clone()
    out = torch.where(selected & (v < 1 - p_keep - p_random), torch.full_like(x, mask_id), out)
    out = torch.where(selected & (v >= 1 - p_keep - p_random) & (v < 1 - p_keep), rnd, out)
    labels = torch.where(selected, x, torch.full_like(x, -100))
    return out, labels
