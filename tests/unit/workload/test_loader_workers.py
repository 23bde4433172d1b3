"""LoaderWorkers wraps a held DataLoader's iterator factory once, however many loops read it, and keeps its last
iterator only while something else holds it."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from dlperf.workload.loader_workers import LoaderWorkers

pytestmark = pytest.mark.unit


class _Wrapper:
    def __init__(self, loader: DataLoader[Any]) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        yield from self.loader


def _wrapped() -> _Wrapper:
    x = torch.arange(32.0).reshape(16, 2)
    return _Wrapper(DataLoader(TensorDataset(x), batch_size=4))


def test_many_loops_on_one_cached_loader_wrap_its_factory_once() -> None:
    """`train --tune` builds a loop per trial on the loader a caching make_loader returns: each wrapped the factory
    again, one call deeper, and every wrapper kept the iterators alive."""
    loader = _wrapped()
    first = LoaderWorkers(loader)
    factory = loader.loader._get_iterator
    finders = [LoaderWorkers(loader) for _ in range(5)]
    assert loader.loader._get_iterator is factory
    current = iter(loader)
    next(current)  # the generator makes the DataLoader's iterator
    made = [f.iterator(current) for f in (first, *finders)]
    assert made[0] is not None and all(m is made[0] for m in made)
    assert hasattr(made[0], "_index_sampler")  # the DataLoader's iterator, not the generator


def test_an_iterator_the_loader_dropped_is_not_kept() -> None:
    loader = _wrapped()
    finder = LoaderWorkers(loader)
    current = iter(loader)
    next(current)
    assert finder.iterator(current) is not None
    del current
    gc.collect()
    assert finder.iterator(object()) is None


def test_a_plain_dataloader_is_not_wrapped() -> None:
    x = torch.zeros(8, 2)
    loader = DataLoader(TensorDataset(x), batch_size=4)
    factory = loader._get_iterator
    finder = LoaderWorkers(loader)
    assert loader._get_iterator == factory
    assert finder.processes(iter(loader)) == []
