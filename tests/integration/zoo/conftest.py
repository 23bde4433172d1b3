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
