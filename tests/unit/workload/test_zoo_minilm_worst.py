"""zoo:minilm's EvalSpec gives the worst sentence's fidelity, which `dlperf optimize --min-fidelity-worst` holds."""

from __future__ import annotations

from dlperf.workload.zoo import minilm


def test_minilm_s_eval_gives_its_worst_sentence_for_the_worst_case_constraint() -> None:
    spec = minilm.workload().eval
    assert spec is not None and spec.evaluate_worst is not None
