"""describe(): parameter counts, bytes and FLOPs per sample that can be checked by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlperf.workload import Workload, load_workload
from dlperf.workload.info import count_flops, describe

pytestmark = pytest.mark.unit


def test_describe_mlp_by_hand() -> None:
    info = describe(load_workload("zoo:mlp"))
    params = (64 * 256 + 256) + (256 * 256 + 256) + (256 * 10 + 10)
    assert info.params == params
    assert info.parameter_bytes == 4 * params
    assert info.flops_per_sample == 2 * (64 * 256 + 256 * 256 + 256 * 10)
    assert info.metric_name is None and info.higher_is_better is None
    assert info.kind == "mlp" and info.source == "zoo:mlp"
    assert info.to_dict()["input_names"] == ("x",) and info.output_names == ("logits",)


class Attention(nn.Module):
    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, q, q)


def test_sdpa_attention_flops_are_counted() -> None:
    # batch 1, 2 heads, 16 tokens, 8 dims: QK^T and AV are each 2*heads*L*L*d FLOPs
    flops = count_flops(Attention(), (torch.randn(1, 2, 16, 8),))
    assert flops == 2 * (2 * 2 * 16 * 16 * 8)


def test_describe_counts_buffers_in_bytes_and_reports_the_metric() -> None:
    from dlperf.workload import EvalSpec

    w = Workload(
        name="bn",
        make_model=lambda: nn.Sequential(nn.Linear(4, 4, bias=False), nn.BatchNorm1d(4)),
        make_inputs=lambda b: (torch.ones(b, 4),),
        eval=EvalSpec(evaluate=lambda predict: 0.0, metric_name="loss", higher_is_better=False),
    )
    info = describe(w)
    assert info.params == 16 + 8  # weight, BN weight and bias
    # buffers: running_mean, running_var (float32) and num_batches_tracked (int64)
    assert info.parameter_bytes == 4 * (16 + 8) + 4 * 8 + 8
    assert info.flops_per_sample == 2 * 16
    assert info.metric_name == "loss" and info.higher_is_better is False


@pytest.fixture()
def needs_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zoo workload 'needs-extra' whose package is not installed (it takes a seq_len option)."""
    import sys
    import types

    from dlperf.errors import MissingDependency
    from dlperf.workload import zoo

    module = types.ModuleType("dlperf.workload.zoo.needs_extra")
    module.SUMMARY = "a model whose package is not installed"  # type: ignore[attr-defined]

    def workload(seq_len: int = 8) -> Workload:
        raise MissingDependency("somepkg", "zoo")

    module.workload = workload  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dlperf.workload.zoo.needs_extra", module)
    monkeypatch.setitem(zoo.ZOO, "needs-extra", "needs_extra")


UNAVAILABLE = "somepkg is not installed: install it with `pip install 'dlperf[zoo]'`"


def test_zoo_listing_marks_a_workload_with_a_missing_extra_unavailable(needs_extra: None) -> None:
    from dlperf.workload.info import describe_zoo

    mlp, missing = describe_zoo(["mlp", "needs-extra"])
    assert mlp.info is not None and mlp.info.params == 85002 and mlp.to_dict()["unavailable"] is None
    assert missing.info is None
    assert missing.to_dict() == {
        "name": "needs-extra", "source": "zoo:needs-extra", "summary": "a model whose package is not installed",
        "unavailable": UNAVAILABLE,
    }


def test_zoo_listing_takes_names_with_the_prefix_or_options(needs_extra: None) -> None:
    """`dlperf zoo zoo:mlp` listed 'zoo:zoo:mlp' as unknown; an unavailable workload given with options kept its
    options in its name, or was looked up with them and raised KeyError."""
    from dlperf.workload.info import describe_zoo

    mlp, missing = describe_zoo(["zoo:mlp", "needs-extra?seq_len=4"])
    assert mlp.spec == "zoo:mlp" and mlp.info is not None and mlp.info.source == "zoo:mlp"
    assert missing.to_dict() == {
        "name": "needs-extra", "source": "zoo:needs-extra?seq_len=4",
        "summary": "a model whose package is not installed", "unavailable": UNAVAILABLE,
    }
