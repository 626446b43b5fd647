"""Single-threaded fixtures for speed comparisons (imported into a benchmark module as
``from helpers.threads import one_blas_thread, one_torch_thread``)."""

import pytest

from empirical.trainer import torch_threads


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Both paths single-threaded (as the Trainer runs them): on a loaded 2-core machine torch's
    intra-op threads make the torch timings noisy and unfair to compare."""
    with torch_threads(1):
        yield


@pytest.fixture()
def one_blas_thread():
    """numpy's BLAS single-threaded too (the torch side runs on one thread): a fair ratio."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1):
        yield
