"""``slo:``: the latency target a run searches the highest load for (docs/slo.md)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

from iobench.matrix.units import parse_seconds

#: The frame's latency columns a target may name: completion latency's percentiles (merged json+ bins), the means.
LATENCY_METRICS: tuple[str, ...] = (
    "clat_p50_us",
    "clat_p90_us",
    "clat_p99_us",
    "clat_p99_9_us",
    "lat_mean_us",
    "clat_mean_us",
    "slat_mean_us",
)
#: The fio option each kind of load sets: offered IOPS (open loop) or I/Os in flight (closed loop).
LOADS: tuple[str, ...] = ("rate_iops", "iodepth")
#: Where a search starts and stops unless the matrix says: the whole offered total, and per job for iodepth.
DEFAULT_RANGE: dict[str, tuple[int, int]] = {"rate_iops": (100, 1_000_000), "iodepth": (1, 1024)}
#: The most probes a search may take; a probe is one point × repeat (a repeat counts).
MAX_PROBES_LIMIT = 50


class SloModel(BaseModel):
    """``slo:`` as written; its meaning is checked by :func:`slo_spec`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: StrictStr
    limit: StrictStr
    load: Literal["rate_iops", "iodepth"] = "rate_iops"
    resolution: StrictStr | StrictInt | StrictFloat = "2%"
    max_probes: StrictInt = Field(default=16, ge=3, le=MAX_PROBES_LIMIT)
    min_load: StrictInt | None = Field(default=None, ge=1)
    max_load: StrictInt | None = Field(default=None, ge=1)


@dataclass(frozen=True)
class SloSpec:
    """A checked ``slo:`` section."""

    metric: str
    limit_us: float
    limit: str
    """The limit as written (``5ms``), for the answer's sentence."""
    load: Literal["rate_iops", "iodepth"]
    resolution: float
    """The search stops once the highest passing and lowest failing loads are this fraction apart."""
    max_probes: int
    min_load: int
    max_load: int


#: Problems are (field, message, hint): the matrix loader adds the file and line.
Problem = tuple[str, str, str]


def _limit_us(text: str) -> float:
    stripped = text.strip()
    if stripped and stripped[-1].isdigit():
        raise ValueError(f"{text!r} has no unit")
    seconds = parse_seconds(stripped)
    if seconds <= 0:
        raise ValueError(f"{text!r} is not above zero")
    return seconds * 1e6


def _resolution(value: str | int | float) -> float:
    text = str(value).strip().removesuffix("%").strip()
    percent = float(text)
    if not 0 < percent <= 50:
        raise ValueError(f"{value!r} is not between 0 and 50 %")
    return percent / 100.0


def slo_spec(model: SloModel) -> tuple[SloSpec | None, list[Problem]]:
    """The checked section, or the problems with it (every one at once)."""
    problems: list[Problem] = []
    if model.metric not in LATENCY_METRICS:
        close = difflib.get_close_matches(model.metric, LATENCY_METRICS, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        problems.append(
            (
                "metric",
                f"`{model.metric}` is not a latency column",
                f"{hint}columns: {', '.join(LATENCY_METRICS)}",
            )
        )
    limit_us = 0.0
    try:
        limit_us = _limit_us(model.limit)
    except ValueError as exc:
        problems.append(("limit", f"limit {exc}", "write a latency with its unit: `500us`, `5ms`"))
    resolution = 0.0
    try:
        resolution = _resolution(model.resolution)
    except ValueError:
        problems.append(
            ("resolution", f"resolution {model.resolution!r} is not a percentage from 0 to 50", "e.g. `2%`")
        )
    low, high = DEFAULT_RANGE[model.load]
    low = model.min_load if model.min_load is not None else low
    high = model.max_load if model.max_load is not None else max(high, low)
    if high <= low:
        problems.append(
            (
                "max_load",
                f"max_load {high} is not above min_load {low}",
                "the search needs a range to look in",
            )
        )
    if problems:
        return None, problems
    return SloSpec(
        model.metric, limit_us, model.limit.strip(), model.load, resolution, model.max_probes, low, high
    ), []
