"""A `train --tune` trial has a headline in `runs list` (it was empty)."""

from __future__ import annotations

import pytest

from dlperf.report.terminal import kind_headline
from dlperf.train.tune import ACCEPTED, FAILED, Trial

pytestmark = pytest.mark.unit


def test_a_measured_trial_says_its_change_and_speedup() -> None:
    trial = Trial("dataloader", {"num_workers": 2, "pin_memory": True}, "", ACCEPTED, speedup=1.874,
                  verdict="faster")
    assert kind_headline("train-trial", trial.to_dict()) == "dataloader: num_workers=2, pin_memory=True 1.87x (faster)"


def test_a_failed_trial_says_why() -> None:
    trial = Trial("compile", {"compile": True}, "", FAILED, reason="loss parity failed (+3.1%)")
    assert kind_headline("train-trial", trial.to_dict()) == "compile: compile=True (failed: loss parity failed (+3.1%))"
