"""Which hardware class the Ray executor times candidates on: timings are only compared within one class."""

from __future__ import annotations

import pytest

from dlperf.ray.trials import NodeInfo, choose_hardware

pytestmark = pytest.mark.unit


def _node(node_id: str, key: str) -> NodeInfo:
    return NodeInfo(node_id, f"host-{node_id}", key, sees_workdir=True)


def test_the_class_with_most_timing_slots_wins() -> None:
    nodes = [_node("a", "xeon"), _node("b", "epyc"), _node("c", "epyc")]
    assert choose_hardware(nodes, {"a": 1, "b": 1, "c": 1}, local_node="a") == "epyc"
    # slots, not nodes, count: one node offering three timing slots outweighs two with one each
    assert choose_hardware(nodes, {"a": 3, "b": 1, "c": 1}, local_node="b") == "xeon"


def test_a_tie_goes_to_this_nodes_class_then_to_name_order() -> None:
    nodes = [_node("a", "xeon"), _node("b", "epyc")]
    assert choose_hardware(nodes, {"a": 1, "b": 1}, local_node="a") == "xeon"
    assert choose_hardware(nodes, {"a": 1, "b": 1}, local_node="b") == "epyc"
    assert choose_hardware(nodes, {"a": 1, "b": 1}, local_node="elsewhere") == "epyc"


def test_a_node_missing_from_slots_counts_once() -> None:
    nodes = [_node("a", "xeon"), _node("b", "epyc"), _node("c", "epyc")]
    assert choose_hardware(nodes, {"a": 2}, local_node=None) == "epyc"
