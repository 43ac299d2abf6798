"""onyx.runtime.blas: the run's BLAS thread limit, and one thread for small products."""

from __future__ import annotations

import numpy as np
import pytest

from onyx.runtime import blas


class _FakeLib:
    def __init__(self, threads: int):
        self.threads, self.history = threads, []

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.threads = n
        self.history.append(n)


@pytest.fixture
def lib(monkeypatch):
    fake = _FakeLib(4)
    monkeypatch.setattr(blas, "_libs", [fake])
    return fake


def test_limit_sets_and_restores(lib):
    with blas.limit(2):
        assert lib.threads == 2 and blas.threads() == 2
    assert lib.threads == 4 and blas.threads() == 1


def test_limit_zero_keeps_the_library_setting(lib):
    with blas.limit(0):
        assert lib.threads == 4 and blas.threads() == 4
    assert lib.history == []


@pytest.mark.parametrize(
    ("m", "k", "n", "single"),
    [
        (4, 8, 8, False),  # tiny: OpenBLAS keeps it on one thread by itself
        (32, 128, 512, True),  # small: one thread
        (512, 512, 512, False),  # large: the run's limit
    ],
)
def test_small_products_run_on_one_thread(lib, monkeypatch, m, k, n, single):
    seen = []
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    real = np.matmul

    def spy(x, y):
        seen.append(lib.threads)
        return real(x, y)

    with blas.limit(2):
        with monkeypatch.context() as patch:
            patch.setattr(np, "matmul", spy)
            y = blas.matmul(a, b)
        assert lib.threads == 2  # restored after the product
    assert seen == [1 if single else 2]
    np.testing.assert_array_equal(y, np.full((m, n), k, np.float32))


def test_no_switch_when_the_run_has_one_thread(lib):
    with blas.limit(1):
        blas.matmul(np.ones((64, 128), np.float32), np.ones((128, 512), np.float32))
    assert lib.history == [1, 4]  # the limit and its restoring only
