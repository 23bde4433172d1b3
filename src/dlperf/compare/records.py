"""Read the measurements back out of stored run records, whichever command wrote them.

bench and check runs store `points`, each with a batch size and the raw `measurement` (measure/bench.py);
ab runs store the two sides' `measurements`. Anything else has no raw samples.
"""

from __future__ import annotations

from dlperf.errors import StoreError
from dlperf.measure.stats import Measurement
from dlperf.store.records import SAMPLED_KINDS, RunRecord


def point_measurements(record: RunRecord) -> dict[int, Measurement]:
    """Batch size -> Measurement of a bench-like run; StoreError when the run holds no raw samples."""
    points = record.result.get("points") if isinstance(record.result, dict) else None
    found: dict[int, Measurement] = {}
    for point in points or []:
        try:
            found[int(point["batch_size"])] = Measurement.from_dict(point["measurement"])
        except (KeyError, TypeError, ValueError):
            continue
    if not found and record.kind not in SAMPLED_KINDS:  # a load run has samples, per level, not per batch size
        raise StoreError(
            f"run {record.id} is {a_kind(record.kind)} run: this takes a bench or check run (per-batch-size latency "
            "samples; `dlperf runs list --kind bench` lists them)"
        )
    if not found:
        raise StoreError(
            f"run {record.id} (kind '{record.kind}', status {record.status}) holds no latency samples: "
            f"give a bench or check run (`dlperf runs list --kind bench` lists them)"
        )
    return found


def train_measurement(record: RunRecord) -> Measurement | None:
    """The step times of a train run measured as one configuration (`dlperf train`, not --tune or --nproc), a
    Measurement whose items are the samples of a step; None for any other run."""
    result = record.result if isinstance(record.result, dict) else {}
    if record.kind != "train" or not isinstance(result.get("measurement"), dict):
        return None
    try:
        measurement = Measurement.from_dict(result["measurement"])
    except (KeyError, TypeError, ValueError):
        return None
    return measurement if measurement.n else None


def has_samples(record: RunRecord) -> bool:
    try:
        point_measurements(record)
    except StoreError:
        return False
    return True


def a_kind(kind: str) -> str:
    """"a 'bench'", "an 'ab'": a run kind with its article."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} '{kind}'"
