"""Hosts that differ: per point on several hosts, the hosts whose IOPS or p99 is far from the others'.

Per point × repeat × direction, each host's own numbers (fio's group rule on
its jobs: :func:`iobench.results.points.point_totals` with ``by=["host"]``)
are compared with the other hosts', metric by metric (:data:`METRICS`):

- the centre is the hosts' **median** and the spread their **median absolute
  deviation** (MAD: the median of the hosts' distances from that median),
  which one odd host cannot move, as it moves a mean and a standard deviation;
- a host is far when its distance from the median is more than
  :data:`OUTLIER_MADS` MADs (5 MADs is Iglewicz and Hoaglin's modified
  z-score of 3.4, about 3.4 standard deviations of a normal spread), the MAD
  taken as at least :data:`MIN_SPREAD_PCT` % of the median: hosts that agree
  to within a fraction of a percent have a MAD near 0 — with three hosts, two
  that agree make it 0 — and the spread hosts show between repeats is a few
  percent. So no host is far for lying less than 15 % from the median,
  whatever the number of hosts: with three, one 10 % off the other two is no
  finding.

Fewer than :data:`MIN_HOSTS` hosts cannot be judged (with two, each is as far
from the median as the other): the columns are NA.

The frame's ``host_outliers`` names the far hosts (space-separated, in host
order; empty when none), ``host_outliers_detail`` says, per host, which
metric, its value, the median and the distance.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from iobench.results.points import data_rows, point_totals

#: Far: more than this many MADs from the hosts' median ...
OUTLIER_MADS = 5.0
#: ... the MAD taken as at least this % of the median (so far is more than 15 % from it).
MIN_SPREAD_PCT = 3.0
#: Fewer hosts in a point cannot be judged.
MIN_HOSTS = 3
#: The rule in words, for the report and the figures' captions.
RULE = (
    f"a host more than {OUTLIER_MADS:g} MADs from the hosts' median (the MAD: the median of the hosts' "
    f"distances from it, taken as at least {MIN_SPREAD_PCT:g} % of the median, so more than "
    f"{OUTLIER_MADS * MIN_SPREAD_PCT:g} % from it), on {MIN_HOSTS} hosts or more"
)
#: The metrics compared, with the words a detail uses.
METRICS: dict[str, tuple[str, str]] = {"iops": ("IOPS", ""), "clat_p99_us": ("p99", " µs")}
#: The columns :func:`outliers` gives, per point × repeat × direction.
COLUMNS: tuple[str, ...] = ("host_outliers", "host_outliers_detail")


def judge_hosts(values: pd.Series) -> list[tuple[str, float, float, float]]:
    """The far hosts among ``values`` (host → a metric's value): ``(host, value, median, MADs)`` each.

    ``MADs`` is the distance from the median in MADs, the MAD taken as at least
    :data:`MIN_SPREAD_PCT` % of the median (infinite when both are 0).
    """
    known = values.dropna().astype(float)
    if len(known) < MIN_HOSTS:
        return []
    median = float(known.median())
    distance = (known - median).abs()
    mad = max(float(distance.median()), MIN_SPREAD_PCT / 100.0 * abs(median))
    far = []
    for host, value in known.items():
        gap = abs(float(value) - median)
        mads = gap / mad if mad > 0 else (np.inf if gap > 0 else 0.0)
        if mads > OUTLIER_MADS:
            far.append((str(host), float(value), median, mads))
    return far


def _number(value: float) -> str:
    """``12,345`` or, below 100, three significant digits (``0.512``): a latency of a few µs keeps its digits."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _detail(host: str, metric: str, value: float, median: float, mads: float) -> str:
    label, unit = METRICS[metric]
    change = 100.0 * (value - median) / abs(median)
    spread = "the other hosts agree exactly" if np.isinf(mads) else f"{mads:.1f} MADs"
    return (
        f"{host}: {label} {_number(value)}{unit}, {abs(change):.0f} % {'above' if change > 0 else 'below'} "
        f"the hosts' median of {_number(median)}{unit} ({spread})"
    )


def outliers(frame: pd.DataFrame) -> pd.DataFrame:
    """Each point × repeat × direction of ``frame`` that ran on several hosts, judged (module note).

    Parameters
    ----------
    frame : pandas.DataFrame
        A tidy frame with a ``host`` column.

    Returns
    -------
    pandas.DataFrame
        The point keys of :func:`~iobench.results.points.point_totals`
        (``run_id``, ``point``, ``groupid``, ``repeat``, ``direction``, those
        present), then
        :data:`COLUMNS`; one row per point × repeat × direction with at least
        two hosts (NA below :data:`MIN_HOSTS`).
    """
    rows = data_rows(frame)
    reporting = ["groupid"] if "groupid" in rows and rows["groupid"].notna().any() else []
    keys = [c for c in ("run_id", "point", *reporting, "repeat", "direction") if c in frame]
    empty = pd.DataFrame(columns=[*keys, *COLUMNS])
    if "host" not in rows or rows.empty or rows["host"].nunique() < 2:
        return empty
    several = rows.groupby(keys, dropna=False)["host"].transform("nunique") >= 2
    rows = rows[several.to_numpy()]
    if rows.empty:
        return empty
    needed = ("host", "iops", "total_ios", "runtime_ms", "io_bytes", "clat_bins", "clat_p99_us")
    per_host = point_totals(rows[[c for c in (*keys, *needed) if c in rows]], by=["host"])
    found = []
    for key, group in per_host.groupby(keys, dropna=False, sort=True):
        hosts = group["host"].astype(str).to_numpy()
        order = {h: i for i, h in enumerate(sorted(hosts))}
        named: dict[str, list[str]] = {}
        judged = group["host"].nunique() >= MIN_HOSTS
        for metric in METRICS:
            if metric not in group:
                continue
            values = pd.Series(
                group[metric].astype("Float64").to_numpy(dtype=float, na_value=np.nan), index=hosts
            )
            for host, value, median, mads in judge_hosts(values):
                named.setdefault(host, []).append(_detail(host, metric, value, median, mads))
        ordered = sorted(named, key=order.__getitem__)
        found.append(
            {
                **dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)),
                "host_outliers": " ".join(ordered) if judged else None,
                "host_outliers_detail": "; ".join(d for h in ordered for d in named[h]) if judged else None,
            }
        )
    out = pd.DataFrame(found, columns=[*keys, *COLUMNS])
    return out.astype(dict.fromkeys(COLUMNS, "string"))
