"""`dlperf train`'s terminal views read from a stored result: a step's phases and their shares, a tuning's settings
and the measurements it shows, and what a tuning stopped early says it finished."""

from __future__ import annotations

from typing import Any

import pytest

from dlperf.report.train_view import breakdown_table, config_line, partial_tune_view, tune_view
from tests.unit.report.test_terminal import _text

pytestmark = pytest.mark.unit


def _measured(step_s: float, samples_per_s: float) -> dict[str, Any]:
    return {"breakdown_s": {"forward": 0.42 * step_s, "backward": 0.58 * step_s},
            "breakdown_share": {"forward": 0.42, "backward": 0.58}, "samples_per_s": samples_per_s,
            "peak_rss_bytes": 300 * 2**20}


def _trial(knob: str, status: str) -> dict[str, Any]:
    return {"knob": knob, "change": {knob: 1}, "status": status, "reason": "", "samples_per_s": 1000.0}


def test_a_phase_s_share_of_the_step_is_a_percentage() -> None:
    rows = [" ".join(line.split()) for line in _text(breakdown_table(_measured(0.01, 1000.0))).splitlines()]
    assert "forward + loss 4.20 42%" in rows and "backward 5.80 58%" in rows


def test_a_configuration_names_a_learning_rate_scaled_down() -> None:
    assert config_line({"batch_size": 32, "lr_scale": 0.5}) == "batch 32, fp32, lr x0.5"
    assert config_line({"batch_size": 32, "lr_scale": 1.0}) == "batch 32, fp32"


def test_a_tuning_shows_the_best_step_s_own_measurement_when_the_best_is_not_the_baseline() -> None:
    result = {"workload": "mlp", "baseline": {"batch_size": 32}, "best": {"batch_size": 32, "threads": 1},
              "baseline_samples_per_s": 1000.0, "best_samples_per_s": 1500.0, "speedup": 1.5,
              "final_ab": {"verdict": "faster", "speedup_ci": [1.4, 1.6]}, "settings": [],
              "trials": [_trial("threads", "accepted")],
              "baseline_measurement": _measured(0.032, 1000.0), "best_measurement": _measured(0.021, 1500.0)}
    text = " ".join(_text(tune_view(result), width=160).split())  # the tables' titles wrap at their width
    assert "baseline step breakdown (its own measurement: 1,000 samples/s" in text
    assert "best step breakdown (its own measurement: 1,500 samples/s" in text
    assert "forward + loss 8.82 42%" in text  # the best's phases, not the baseline's again
    same = _text(tune_view({**result, "best": result["baseline"]}), width=160)
    assert "best step breakdown" not in same  # the baseline's table again, under another name


def test_a_tuning_stopped_early_counts_the_trials_it_ran_not_the_knobs_it_skipped() -> None:
    result = {"workload": "mlp", "baseline": {"batch_size": 32},
              "trials": [_trial("threads", "accepted"), _trial("precision", "skipped"), _trial("compile", "skipped")]}
    assert "tuning mlp stopped after 1 trial, before the baseline" in _text(partial_tune_view(result), width=160)
