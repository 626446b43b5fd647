"""theory/counter_rng.py: SplitMix64 at a counter equals the reference generator's stream; 53-bit
uniforms; the ziggurat's normals; integer alias tables sample their distribution to 2^-(bits)."""

import numpy as np
import pytest
from numba import njit
from scipy import stats

from theory.counter_rng import (alias_bits, alias_pick, alias_rows64, implied_distribution, int_alias_table,
                                normals, splitmix64, uniform53)

MASK = 2**64 - 1


def _reference_stream(seed: int, n: int) -> list[int]:
    """SplitMix64 as published (Steele, Lea & Flood 2014): state += gamma; mix the state."""
    out, state = [], seed
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        out.append(z ^ (z >> 31))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2**63 + 12345])
def test_splitmix64_at_a_counter_is_the_reference_stream(seed):
    ref = _reference_stream(seed, 6)
    got = [int(splitmix64(np.uint64(seed), np.uint64(n))) for n in range(6)]
    assert got == ref
    if seed == 0:
        assert ref[0] == 0xE220A8397B1DCDAF  # the published first output for seed 0


def test_uniform53_uses_the_top_53_bits():
    for z in (0, MASK, 2**63, 0x0123456789ABCDEF):
        assert uniform53(np.uint64(z)) == (z >> 11) * 2.0**-53
    assert uniform53(np.uint64(MASK)) < 1.0


@njit
def _draw(key, n):
    out = np.empty(n)
    normals(key, 1.0, out)
    return out


def test_normals_are_standard_normal_and_keyed():
    z = _draw(np.uint64(7), 200_000)
    assert stats.kstest(z, "norm").pvalue > 1e-3
    tail = np.mean(np.abs(z) > 3.442619855899)  # the ziggurat's tail branch is taken too
    expect = 2 * stats.norm.sf(3.442619855899)
    assert abs(tail - expect) < 4 * np.sqrt(expect / z.size)
    np.testing.assert_array_equal(_draw(np.uint64(7), 10), z[:10])  # counters 0, 1, ... in order
    assert not np.array_equal(_draw(np.uint64(8), 10), z[:10])
    scaled = np.empty(5)
    normals(np.uint64(7), 2.5, scaled)
    np.testing.assert_allclose(scaled, 2.5 * z[:5], rtol=1e-15)


def test_int_alias_table_samples_its_distribution_to_its_resolution():
    p = np.array([0.1, 0.25, 0.05, 0.6, 0.0])
    thr, ali, nb = int_alias_table(p)
    assert nb == 3 and thr.size == 8
    q = implied_distribution(thr, ali, nb, p.size)
    assert np.max(np.abs(q - p)) <= 2.0**-(32 - nb)
    # alias_pick over every 2^16-th 32-bit word: the bucket's frequency, coin resolved to 2^-13
    shift, mask = alias_bits(nb)
    words = np.arange(0, 2**32, 2**16, dtype=np.uint64)
    picks = np.array([alias_pick(r, thr, ali, shift, mask) for r in words])
    np.testing.assert_allclose(np.bincount(picks, minlength=p.size)[: p.size] / words.size, q, atol=2.0**-13)


def test_alias_rows64_per_row_distributions():
    rows = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]])
    thr, ali, nb = alias_rows64(rows)
    assert nb == 2 and thr.shape == ali.shape == (2, 4)
    acc = thr.astype(float) / 2.0**(64 - nb)
    for r, p in enumerate(rows / rows.sum(1, keepdims=True)):
        q = acc[r] / 4
        np.add.at(q, ali[r], (1 - acc[r]) / 4)
        np.testing.assert_allclose(q[:3], p, atol=1e-15)
