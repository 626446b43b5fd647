"""Tiny in-memory corpora for the real-text tests (no WikiText needed)."""

import numpy as np


def grammar(n_lines: int, seed: int) -> list[str]:
    """A toy language with strong bigram structure: '<det> <noun> <verb> <det> <noun> .'"""
    rng = np.random.default_rng(seed)
    det, noun, verb = ["the", "a"], ["cat", "dog", "bird", "fish", "frog"], ["sees", "likes", "eats"]
    return [" ".join([rng.choice(det), rng.choice(noun), rng.choice(verb), rng.choice(det), rng.choice(noun), "."])
            for _ in range(n_lines)]
