"""One cache folder for the whole zoo test folder, so digits-cnn trains once and never in the user's cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="package", autouse=True)
def zoo_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("dlperf-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLPERF_CACHE_DIR", str(path))
        yield path


@pytest.fixture(scope="package", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """These tests check values, not speed; one thread avoids spin-waiting on a shared, busy machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
