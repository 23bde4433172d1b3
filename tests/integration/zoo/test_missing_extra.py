"""A zoo workload whose extra is not installed: `dlperf zoo` lists it as unavailable with the install hint, and every
other command says the hint itself, not "its model factory raised MissingDependency: ..."."""

from __future__ import annotations

import sys

import pytest
import torch

from dlperf.errors import MissingDependency, WorkloadError
from dlperf.workload import Workload, load_workload

pytestmark = pytest.mark.integration


@pytest.fixture()
def no_sklearn(monkeypatch, tmp_path):
    """scikit-learn cannot be imported (a None entry in sys.modules raises ImportError), and no weights are cached."""
    from dlperf.workload.zoo import digits_cnn

    monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path))
    for name in [n for n in sys.modules if n == "sklearn" or n.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    digits_cnn.data.cache_clear()
    yield
    digits_cnn.data.cache_clear()


def test_dlperf_zoo_lists_digits_cnn_as_unavailable(no_sklearn):
    """The listing failed: build_model wrapped the MissingDependency in a WorkloadError, which describe_zoo does not
    catch, so `dlperf zoo` printed one error and nothing else (exit 2)."""
    from dlperf.workload.info import describe_zoo

    mlp, digits = describe_zoo(["mlp", "digits-cnn"])
    assert mlp.info is not None and mlp.unavailable is None
    assert digits.info is None
    assert digits.unavailable == "scikit-learn is not installed: install it with `pip install 'dlperf[zoo]'`"


def test_a_missing_extra_is_raised_as_such(no_sklearn):
    workload = load_workload("zoo:digits-cnn")
    with pytest.raises(MissingDependency, match=r"pip install 'dlperf\[zoo\]'"):
        workload.build_model()


def test_a_missing_extra_from_the_inputs_or_the_metric_is_raised_as_such():
    def missing(*args, **kwargs):
        raise MissingDependency("scikit-learn", "zoo")

    import dlperf

    workload = Workload(name="w", make_model=lambda: torch.nn.Linear(2, 2), make_inputs=missing,
                        eval=dlperf.EvalSpec(evaluate=missing, metric_name="acc"))
    with pytest.raises(MissingDependency):
        workload.example_inputs(1)
    with pytest.raises(MissingDependency):
        workload.score(torch.nn.Linear(2, 2))
    # any other error of the user's factory is still a WorkloadError that names it
    def broken_inputs(batch_size: int) -> tuple[torch.Tensor, ...]:
        raise ZeroDivisionError("division by zero")

    broken = Workload(name="b", make_model=lambda: torch.nn.Linear(2, 2), make_inputs=broken_inputs)
    with pytest.raises(WorkloadError, match="its inputs factory raised ZeroDivisionError"):
        broken.example_inputs(1)
