"""The notes that say why items/s and the median disagree (a spell of slow calls) or why a run is noisy (it changed
speed part-way)."""

from __future__ import annotations

import random

from dlperf.measure.notes import bench_notes
from dlperf.measure.stats import Measurement


def _steady(n: int, ns: int = 2_100_000, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [int(ns * rng.uniform(0.98, 1.04)) for _ in range(n)]


def test_a_spell_of_slow_calls_is_named_where_items_per_s_is_far_below_one_over_p50() -> None:
    samples = _steady(336)
    samples[143:155] = [20_100_000] * 12  # 12 calls of 20 ms among 2.1 ms ones: items/s 29% below 1/p50
    m = Measurement(samples)
    assert m.heavy_tail_note is None and m.noise_warning is None and m.slow_start is None
    note = m.throughput_gap_note
    assert note is not None
    assert note.startswith("items/s is 2")  # 25-29% below
    assert "a spell of slow calls, timed calls 144-155 (12 of their 12 over 1.5x the median, 20.1 ms" in note
    assert any(line.startswith("batch 1: items/s is") for line in bench_notes([{"batch_size": 1,
                                                                                "summary": m.summary()}]))


def test_a_steady_model_gets_no_throughput_gap_note() -> None:
    m = Measurement(_steady(400))
    assert m.throughput_gap_note is None and m.speed_change_note is None


def test_slow_calls_spread_over_the_run_are_said_to_be_spread() -> None:
    samples = _steady(300)
    for i in range(0, 300, 10):  # every tenth call 6x slower: mean 1.5x the median
        samples[i] = 12_600_000
    note = Measurement(samples).throughput_gap_note
    assert note is not None and "30 calls (10%) over 1.5x the median, spread over the run" in note


def test_a_run_that_changed_speed_part_way_says_where_and_from_what_to_what() -> None:
    samples = _steady(193) + _steady(184, ns=3_100_000, seed=1)
    m = Measurement(samples)
    assert m.noise_warning is not None and m.noise_warning.startswith("noisy")
    assert m.speed_change_note is not None
    assert m.speed_change_note.startswith("the run changed speed at timed call 194 of 377: 2.1")
    assert "ms at the median before, 3.1" in m.speed_change_note


def test_noise_spread_over_the_whole_run_is_no_change_of_speed() -> None:
    rng = random.Random(3)
    m = Measurement([int(2_100_000 * rng.uniform(0.7, 1.5)) for _ in range(400)])
    assert m.noise_warning is not None and m.speed_change_note is None


def test_a_slow_start_is_left_to_its_own_note() -> None:
    m = Measurement([10_100_000] * 100 + _steady(200))
    assert m.slow_start is not None and m.slow_start.calls == 100 and m.noise_warning is not None
    assert m.speed_change_note is None


def test_a_spell_of_slow_calls_to_the_run_s_end_gets_the_speed_change_note_alone() -> None:
    """200 calls of 2.1 ms then 100 of 4.2 ms got both notes, one of a spell of slow calls 201-300 and one of a
    change of speed at call 201: the same fact twice. The speed change, which names both speeds, is said; a spell in
    the middle of the run is still a spell."""
    m = Measurement(_steady(200) + _steady(100, ns=4_200_000, seed=1))
    assert m.speed_change_note is not None and m.speed_change_note.startswith("the run changed speed at timed call "
                                                                               "201 of 300")
    assert m.throughput_gap_note is None
    notes = bench_notes([{"batch_size": 1, "summary": m.summary()}])
    assert notes == [f"batch 1: {m.speed_change_note}"]
    middle = Measurement(_steady(150) + _steady(100, ns=4_200_000, seed=1) + _steady(50, seed=2))
    assert middle.throughput_gap_note is not None and "a spell of slow calls, timed calls 151-250" in (
        middle.throughput_gap_note)
