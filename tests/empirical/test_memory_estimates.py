"""The memory estimates (the papers' ``estimate`` slots, :mod:`theory.limits`) against what a run
really holds: for every training variant of the four papers, the estimate is at least the bytes a
short run allocates (numpy and Python: ``tracemalloc``'s peak; torch: every live tensor's storage
while the experiment is alive), and it grows with the field that sizes the variant's largest
arrays as those arrays do (the power of the field: ``K x K`` for JoMA's centred G, ``d_a x D`` for
the topic paper's keys)."""

from __future__ import annotations

import gc
import importlib
import tracemalloc
import warnings

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from figures.papers import get
from theory.limits import estimate

#: the module:function of each paper that returns ``(trajectory, experiment)``
TRAIN = {"scb": "empirical.scb.experiment:train", "scan-snap": "empirical.scan_snap.experiment:train",
         "topic": "empirical.topic.experiment:train", "joma": "empirical.joma.experiment:train"}

#: (paper, variant, field, sizes drawn, fixed settings): every variant of every paper's Config.VARIANTS
CASES = [
    ("joma", "fixed", "K", (50, 500), {}),
    ("joma", "ce", "K", (50, 500), {}),
    ("joma", "mixture", "K", (4, 50), {}),
    ("joma", "probe", "steps", (2, 4), {}),
    ("joma", "hblt", "depth", (4, 10), {}),
    ("joma", "hier", "width", (16, 192), {"hidden": 256, "batch": 256}),
    ("topic", "stage1", "v", (10, 60), {}),
    ("topic", "joint", "v", (10, 60), {}),
    ("topic", "attention", "v", (10, 60), {}),
    ("topic", "embedding", "v", (10, 60), {}),
    ("scb", "preconditioned", "N", (10, 250), {}),
    ("scb", "sgd", "N", (10, 250), {}),
    ("scb", "softmax", "N", (10, 250), {}),
    ("scan-snap", "counts", "num_common", (10, 800), {}),
    ("scan-snap", "sequences", "num_common", (10, 800), {}),
]


def test_every_variant_of_every_paper_is_a_case():
    covered = {(p, v) for p, v, *_ in CASES}
    for paper in TRAIN:
        assert {(paper, v) for v in get(paper).Config.VARIANTS} <= covered, paper


def _config(paper, variant, field, size, fixed):
    sets = {**fixed, field: size} if field != "steps" else dict(fixed)
    sets.setdefault("steps", 2)
    sets.setdefault("log_every", 1)
    return get(paper).make_config([f"{k}={v}" for k, v in sets.items()], variant=variant)


def _memory_estimate(paper, cfg) -> float:
    return sum(t.amount for t in estimate(paper, cfg, "train", estimator=get(paper).slot("estimate"))["memory"])


def _live_tensor_bytes() -> int:
    import torch

    seen, total = set(), 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for o in gc.get_objects():
            try:
                is_tensor = isinstance(o, torch.Tensor)
            except ReferenceError:  # a dead weakref.proxy (left by an earlier test) cannot be inspected
                continue
            if is_tensor:
                try:
                    s = o.untyped_storage()
                except Exception:  # noqa: BLE001 - a tensor without storage holds no bytes
                    continue
                if s.data_ptr() not in seen:
                    seen.add(s.data_ptr())
                    total += s.nbytes()
    return total


def _allocated(paper, cfg) -> int:
    module, fn = TRAIN[paper].split(":")
    train = getattr(importlib.import_module(module), fn)
    gc.collect()
    base = _live_tensor_bytes()
    tracemalloc.start()
    try:
        result = train(cfg, device="cpu")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = _live_tensor_bytes() - base
    del result
    gc.collect()
    return peak + held


#: cases whose two runs take over ~10 s on 2 cores
_SLOW = {("topic", "joint"), ("topic", "attention"), ("joma", "hier")}


@pytest.mark.parametrize("paper, variant, field, sizes, fixed",
                         [pytest.param(*c, marks=pytest.mark.slow) if c[:2] in _SLOW else c for c in CASES],
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_estimate_is_at_least_what_a_run_allocates(paper, variant, field, sizes, fixed, data):
    size = data.draw(st.integers(*sizes), label=field)
    cfg = _config(paper, variant, field, size, fixed)
    assert _memory_estimate(paper, cfg) >= _allocated(paper, cfg)


#: (paper, variant, field, power): the estimate's growth in the field that sizes the largest arrays
SCALING = [("joma", "fixed", "K", 2), ("joma", "ce", "K", 2), ("joma", "hier", "width", 2),
           ("joma", "hier", "hidden", 1), ("joma", "hblt", "depth", None), ("topic", "joint", "d_a", 1),
           ("topic", "stage1", "v", 2), ("scb", "sgd", "N", 2), ("scan-snap", "counts", "num_common", 2)]


@pytest.mark.parametrize("paper, variant, field, power", SCALING, ids=[f"{s[0]}-{s[1]}-{s[2]}" for s in SCALING])
@settings(max_examples=10, deadline=None)
@given(x=st.integers(10**6, 10**8))
def test_estimate_grows_as_the_arrays_do(paper, variant, field, power, x):
    """Doubling the field multiplies the estimate by 2^power once its arrays dominate (hblt: one
    more tree level doubles the leaves of a binary tree); the refusal names that field."""
    if field == "depth":
        x, factor, step = 12 + x % 12, 2.0, 1
    else:
        factor, step = 2.0**power, x
    row = get(paper)
    a = _memory_estimate(paper, row.make_config([f"{field}={x}"], variant=variant))
    b = _memory_estimate(paper, row.make_config([f"{field}={x + step}"], variant=variant))
    assert b / a == pytest.approx(factor, rel=0.02)
    worst = max(estimate(paper, row.make_config([f"{field}={x}"], variant=variant), "train",
                         estimator=row.slot("estimate"))["memory"], key=lambda t: t.amount)
    assert worst.field == field
