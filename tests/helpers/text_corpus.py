"""A tiny WikiText-shaped corpus on disk for the real-text tests (imported as ``helpers.text_corpus``):
a toy language with bigram structure. Cells read their corpus from a path, as spawned workers must."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from empirical import text


def write_toy_corpus(folder: Path, n_train: int = 2500, n_valid: int = 150, seed: int = 0) -> str:
    """Write ``n_train`` training and ``n_valid`` validation lines '<det> <noun> <verb> <det> <noun> .'
    into ``folder`` (WikiText file names); returns the folder as a string."""
    rng = np.random.default_rng(seed)
    det, noun, verb = ["the", "a"], ["cat", "dog", "bird", "fish", "frog"], ["sees", "likes", "eats"]

    def lines(n):
        return "\n".join(" ".join([rng.choice(det), rng.choice(noun), rng.choice(verb), rng.choice(det),
                                   rng.choice(noun), "."]) for _ in range(n))

    (folder / text.TRAIN_FILE).write_text(lines(n_train))
    (folder / text.VALID_FILE).write_text(lines(n_valid))
    return str(folder)
