"""Points on several hosts as the report shows them: whose sum a number is, and the hosts far from the others."""

from __future__ import annotations

from typing import Any

import pandas as pd

from iobench.matrix.display import format_value
from iobench.results.hostoutliers import RULE
from iobench.results.points import parameter_columns


def summed_by(hosts: object) -> str:
    """``sum of 3 hosts`` (or ``1 host``): what a summary row's IOPS and bandwidth add up."""
    if hosts is None or hosts is pd.NA or (isinstance(hosts, float) and pd.isna(hosts)):
        return "–"
    count = int(str(hosts))
    return f"sum of {count} hosts" if count > 1 else "1 host"


def outlier_section(frame: pd.DataFrame) -> dict[str, Any]:
    """The report's "Hosts that differ": every point × repeat × direction with a host far from the others.

    Returns
    -------
    dict
        ``rows``: ``(point, repeat, direction, parameters, hosts, detail)``;
        ``judged``: how many points × repeats × directions on
        :data:`~iobench.results.hostoutliers.MIN_HOSTS` hosts or more were
        judged; ``rule``: the rule in words.
    """
    rule = f"in IOPS or p99, {RULE}; judged per repeat"
    if "host_outliers" not in frame:
        return {"rows": [], "judged": 0, "rule": rule}
    keys = [c for c in ("point", "repeat", "direction") if c in frame]
    judged = frame[frame["host_outliers"].notna()].drop_duplicates(keys)
    found = judged[judged["host_outliers"].ne("")]
    params = [c for c in parameter_columns(frame) if frame[c].nunique(dropna=False) > 1 and c != "run_id"]
    rows = [
        (
            str(r["point"]),
            str(r["repeat"]),
            str(r.get("direction", "–")),
            " ".join(f"{c}={format_value(c, r[c], missing='–')}" for c in params) or "–",
            str(r["host_outliers"]),
            str(r["host_outliers_detail"]),
        )
        for _, r in found.iterrows()
    ]
    return {"rows": rows, "judged": len(judged), "rule": rule}
