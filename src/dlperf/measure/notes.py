"""The warnings a bench run's points carry, in words: noise, a cap that cut a batch size short, a slow start, a heavy
tail, other load on the machine. Here, under measure, so a `BenchResult` words them as `dlperf bench` prints them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.measure.stats import MODEL_VARIATION, NOISE_CAUSES

QUIET_NOISE_CAUSES = f"{MODEL_VARIATION}, frequency scaling or too few samples"
"""A noisy point's causes where other processes kept under half a core busy: the spread is the model's own first (a
loop of random length read "other load on the machine" first)."""


def _little_other_load(point: Mapping[str, Any]) -> float | None:
    """The cores other processes kept busy while `point` measured, where that was little (under the contention
    warning's threshold); None where it was more, or is not recorded (a point stored before it was)."""
    other = point.get("other_load_percent")
    if not isinstance(other, (int, float)) or point.get("contention_warning"):
        return None
    return float(other) / 100


def bench_warnings(points: Sequence[dict[str, Any]]) -> list[str]:
    """The points' noise and contention warnings, one line per kind rather than one per batch size."""
    lines: list[str] = []
    noisy = [p for p in points if (p["summary"].get("noise_warning") or "").startswith("noisy")]
    if noisy:
        sizes = ", ".join(str(p["batch_size"]) for p in noisy)
        quiet = [_little_other_load(p) for p in noisy]
        if all(q is not None for q in quiet):
            lines.append(f"noisy at batch {sizes} (IQR/p50 > 10%) with little other load on the machine (at most "
                         f"{max(q or 0.0 for q in quiet):.1f} cores): {QUIET_NOISE_CAUSES}")
        else:
            lines.append(f"noisy at batch {sizes} (IQR/p50 > 10%): {NOISE_CAUSES}")
    lines += [f"batch {p['batch_size']}: {p['summary']['noise_warning']}" for p in points
              if p["summary"].get("noise_warning") and p not in noisy]
    return lines + bench_notes(points)


def point_noise_text(point: Mapping[str, Any]) -> str | None:
    """One point's noise warning as `bench_warnings` words it: where the point ran with little other load (no
    contention warning), the model's own variation first instead of 'other load on the machine'."""
    warning = (point.get("summary") or {}).get("noise_warning")
    quiet = _little_other_load(point)
    if not isinstance(warning, str) or not warning.endswith(NOISE_CAUSES) or quiet is None:
        return warning
    return (f"{warning.removesuffix(NOISE_CAUSES).rstrip('; ')} with little other load on the machine "
            f"({quiet:.1f} cores): {QUIET_NOISE_CAUSES}")


def bench_notes(points: Sequence[Mapping[str, Any]]) -> list[str]:
    """The warnings other than noise: a batch size a cap cut short of its minimums, a slow start (a warm-up that was
    not over), a mean far above the median (a few slow calls hold the time), other load on the machine."""
    lines = [f"batch {p['batch_size']}: {p['summary']['stop_note']}" for p in points if p["summary"].get("stop_note")]
    lines += [f"batch {p['batch_size']}: {p['summary'][note]}" for note in (
        "slow_start_note", "heavy_tail_note", "throughput_gap_note", "speed_change_note")
              for p in points if p["summary"].get(note)]
    contended = [p for p in points if p.get("contention_warning")]
    if contended:
        worst = max(contended, key=lambda p: float(p.get("other_load_percent") or 0.0))
        lines.append(f"batch {', '.join(str(p['batch_size']) for p in contended)}: {worst['contention_warning']}")
    return lines
