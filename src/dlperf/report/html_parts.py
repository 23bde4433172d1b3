"""Building blocks of the HTML report's views: tables, number formats (ms, %, p-values), the config tags and
the ranges plots share."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from dlperf.compare.stats import SMALLEST_P
from dlperf.measure.stats import fmt_count
from dlperf.report.svg import Series, esc, fmt_number
from dlperf.store.records import RunRecord

# --- small helpers ---------------------------------------------------------------------------------


def html_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], row_classes: Sequence[str] = (),
               numeric: bool = True) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if i < len(row_classes) and row_classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f'<td class="n">{_cell(v)}</td>' if numeric and _numeric(v)
                                           else f"<td>{_cell(v)}</td>"
                                           for v in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?")


def _numeric(value: Any) -> bool:
    if isinstance(value, Raw):
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    # a bound or an estimate is a number too: a Mann-Whitney p of '<1e-300' (`fmt_p_value`) sat left-aligned in its
    # right-aligned column
    text = str(value).strip().rstrip("%").split(" ")[0]
    if text[:1] in ("<", ">", "~") and text[1:2] != "":
        text = text[1:]
    if THOUSANDS.fullmatch(text):  # '1,800,926' (`fmt_rate`), right-aligned with the other numbers
        return True
    try:
        float(text.replace("+", "", 1))
    except ValueError:
        return text == "-"
    return True


class Raw(str):
    """Already-escaped HTML for a table cell."""


def _cell(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, float):
        return esc(fmt_number(value)) if math.isfinite(value) else "-"
    if value is None:
        return "-"
    return esc(value)


def fmt_ms(seconds: Any) -> str:
    """Milliseconds to four digits; whole ones from 10 s up, where '.4g' wrote 1.235e+04."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "-"
    ms = float(seconds) * 1e3
    return f"{ms:.0f}" if abs(ms) >= 1e4 else f"{ms:.4g}"


def first_number(data: Any, *paths: str) -> float | None:
    """The first number found at one of the dotted `paths` in nested dicts."""
    for path in paths:
        value: Any = data
        for key in path.split("."):
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def json_table(data: Any, limit: int = 80) -> str:
    flat: list[tuple[str, str]] = []

    def walk(value: Any, prefix: str, depth: int) -> None:
        if len(flat) >= limit:
            return
        if isinstance(value, Mapping) and depth < 3 and value:
            for k, v in value.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)
        elif isinstance(value, list) and value and depth < 3 and all(not isinstance(v, (dict, list)) for v in value):
            text = json.dumps(value[:12], default=str) + (" ..." if len(value) > 12 else "")
            flat.append((prefix, text))
        else:
            text = json.dumps(value, default=str)
            flat.append((prefix, text if len(text) < 300 else text[:300] + " ..."))

    walk(data, "", 0)
    if not flat:
        return '<p class="muted">(empty)</p>'
    return html_table(("field", "value"), [(k, Raw(f'<span style="font-family:monospace">{esc(v)}</span>'))
                                           for k, v in flat])


def plot_row(*svgs: str) -> str:
    drawn = [s for s in svgs if s]
    return f'<div class="plots">{"".join(drawn)}</div>' if drawn else ""


def sampled_seconds(point: Mapping[str, Any]) -> tuple[list[float], int] | None:
    m = point.get("measurement")
    if not isinstance(m, Mapping) or not m.get("samples_ns"):
        return None
    return [float(s) / 1e9 for s in m["samples_ns"]], int(m.get("items_per_call", 1) or 1)



def fmt(value: Any) -> str:
    return fmt_number(float(value)) if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def fmt_rate(value: Any) -> str:
    """A throughput (items/s, samples/s) as the terminal prints it: '1,800,926' from 100 up, where `fmt` wrote '1.8e6'
    beside the headline's 1,800,926 items/s and the next row's '476842'."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return fmt_count(value)


def fmt_p_value(value: Any) -> str:
    """A p-value that underflowed to zero is shown as a bound, not as a certain 0."""
    if isinstance(value, (int, float)) and 0 <= value < SMALLEST_P:
        return f"<{SMALLEST_P:.0e}"
    return fmt(value)


def ci_header(confidence: Any) -> str:
    return f"{confidence:.0%} CI" if isinstance(confidence, (int, float)) else "CI"


def fmt_pct(value: Any, sign: bool = True) -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value * 100:+.1f}%" if sign else f"{value * 100:.1f}%"


def fmt_kpi(metric: Any, value: Any) -> str:
    return fmt(value) + " items/s" if metric == "throughput" else fmt_ms(value) + " ms"


def artifact_precision(artifact: Mapping[str, Any], precision: Any) -> str:
    """A bench's precision where it measured an artifact that records its own: the artifact's, with bench's autocast
    where that applies too (a torch recipe is a torch module: `--precision bf16` autocasts it)."""
    own = f"{artifact['precision']} (the artifact's)"
    if artifact.get("engine") == "torch" and precision not in (None, "fp32"):
        return f"{precision} autocast over {own}"
    return own


def config_tags(rec: RunRecord) -> str:
    cfg = rec.config if isinstance(rec.config, Mapping) else {}
    keep = [(k, v) for k, v in cfg.items() if not isinstance(v, (dict, list)) and v is not None and k != "version"]
    if isinstance(cfg.get("batch_sizes"), list):
        keep.insert(0, ("batch_sizes", ",".join(str(b) for b in cfg["batch_sizes"])))
    timer = cfg.get("timer")
    if isinstance(timer, Mapping):
        keep += [(k, timer[k]) for k in ("min_duration_s", "min_iters", "warmup_iters") if k in timer]
    artifact = cfg.get("artifact")
    if isinstance(artifact, Mapping):
        # a bench of an int8 ONNX Runtime artifact read precision=fp32 (bench's autocast setting) and named neither
        # the artifact nor the threads it ran with, which the terminal's settings line gives
        if artifact.get("precision"):
            keep = [(k, artifact_precision(artifact, v) if k == "precision" else v) for k, v in keep]
        if artifact.get("threads") and not cfg.get("threads"):
            keep.append(("threads", f"{artifact['threads']} (the artifact's)"))
        if artifact.get("label") or artifact.get("engine"):
            keep.insert(0, ("artifact", artifact.get("label") or artifact.get("engine")))
    if not keep:
        return ""
    return "<p>" + "".join(f'<span class="tag">{esc(k)}={esc(v)}</span>' for k, v in keep[:14]) + "</p>"


def trimmed_range(values: Sequence[float]) -> tuple[float, float]:
    """1st..99th percentile, so a few outliers do not squash a histogram into one bar."""
    data = sorted(values)
    if not data:
        return 0.0, 1.0
    lo = data[int(0.01 * (len(data) - 1))]
    hi = data[math.ceil(0.99 * (len(data) - 1))]
    return (lo, hi) if hi > lo else (data[0], data[-1])


def wide_range(series: Sequence[Series]) -> bool:
    """Log axis when the values span more than 20x."""
    xs = [float(v) for s in series for v in s.xs if float(v) > 0]
    return bool(xs) and max(xs) / min(xs) > 20



def as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}

