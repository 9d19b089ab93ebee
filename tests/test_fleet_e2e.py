"""A point on several hosts end to end: namespace hosts with their own sshd, one target path on all of them.

Three hosts (tests/netns_hosts.py) read the same target path, as a fleet reads
``/dev/nvme0n1`` everywhere, each held at ``rate_iops``, every point on all
three at once and a ``host_count`` sweep. What must show: every point has a
row per host; ``window_s`` and ``start_skew_ms`` agree with the hosts' spans
(the window and the skew together fit in the longest host's span, whatever the
machine's load made of fio's runtime); the cluster's IOPS and p99 are those computed by hand from the
raw files (±1 %) and the hosts' rates added; every host's time series is there
and its own; the CLI's line per point says whose sum it shows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from netns_hosts import NetnsHosts
from test_fleet_numbers import Outcomes, raw_cluster

import iobench
from iobench.cli.console import headline
from iobench.matrix.model import load_matrix
from iobench.results.points import point_totals
from iobench.runner.sweep import run

pytestmark = [pytest.mark.root, pytest.mark.fio]

RATE = 1500
RUNTIME_S = 3


def _matrix(hosts: NetnsHosts, tmp_path: Path, axes: str) -> Path:
    entries = "".join(
        f"  - {{name: {h.name}, ssh: {h.ssh}, ssh_options: {json.dumps(list(h.ssh_options))}}}\n"
        for h in hosts
    )
    text = (
        "version: 1\nname: fleet-e2e\n"
        f"targets: [{{path: {tmp_path / 'shared.dat'}, size: 8M}}]\n"
        f"fio:\n  ioengine: null\n  rw: randread\n  bs: 4k\n  runtime: {RUNTIME_S}\n  time_based: 1\n"
        f"  rate_iops: {RATE}\n  log_avg_msec: 500\n"
        "hosts:\n" + entries + "matrix:\n" + axes
    )
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path


def test_hosts_sharing_a_target_path_give_one_cluster_over_the_window_they_shared(
    netns_hosts: Callable[..., NetnsHosts], tmp_path: Path
) -> None:
    hosts = netns_hosts(3)
    seen = Outcomes()
    result = run(
        load_matrix(_matrix(hosts, tmp_path, "  iodepth: [1]\n  host_count: [1, 3]\n")),
        out=tmp_path / "results",
        progress=seen,
    )
    assert result.counts == {"ok": 2}
    df = iobench.load(result.run_dir)
    rows = df[df["status"].eq("ok")]
    assert rows.groupby("host_count")["host"].nunique().to_dict() == {1: 1, 3: 3}
    totals = point_totals(df).set_index("host_count")
    assert totals.loc[3, "hosts"] == 3 and totals.loc[1, "hosts"] == 1
    for count, total in totals.iterrows():
        # The window runs from the latest start to the earliest end: with the skew (latest start
        # less earliest) it fits in the span of the host that started first, at most the longest.
        assert total["start_skew_ms"] >= 0 and total["window_s"] > 0 and 0 < total["overlap_pct"] <= 100
        longest_s = total["window_s"] * 100 / total["overlap_pct"]
        assert total["window_s"] + total["start_skew_ms"] / 1000 <= longest_s + 0.001
        assert total["iops"] == pytest.approx(count * RATE, rel=0.01)
    point = Path(result.run_dir) / "points" / f"{int(totals.loc[3, 'point']):04d}-r1"
    raw = raw_cluster(point, window_ms=500.0)
    assert totals.loc[3, "iops"] == pytest.approx(raw["iops"], rel=0.01)
    assert totals.loc[3, "clat_p99_us"] == pytest.approx(raw["p99_us"], rel=0.01)
    assert totals.loc[3, "window_s"] == pytest.approx(raw["window_s"], abs=0.002)
    # Every host's time series, apart though they share the target's name.
    logs = sorted(p.name for p in point.glob("shared.dat_iops.*"))
    assert logs == [f"shared.dat_iops.1.log.host-{h.name}" for h in hosts]
    ts = iobench.timeseries(result.run_dir)
    mine = ts[ts["point"].eq(int(totals.loc[3, "point"])) & ts["metric"].eq("iops")]
    assert sorted(mine["host"].unique()) == [h.name for h in hosts]
    for _, series in mine.groupby("host"):
        assert len(series) >= 2 * RUNTIME_S - 1 and series["value"].median() == pytest.approx(RATE, rel=0.02)
    spans = pd.DataFrame(ts.attrs["spans"])
    starts = spans[spans["point"].eq(int(totals.loc[3, "point"]))].set_index("host")["start_s"]
    # each host's own start, on one clock (two hosts may start within the same millisecond)
    assert sorted(starts.index) == ["a", "b", "c"] and starts.notna().all()
    assert starts.nunique() >= 2 or totals.loc[3, "start_skew_ms"] == 0
    assert (starts.max() - starts.min()) * 1000 == pytest.approx(totals.loc[3, "start_skew_ms"], abs=1.0)
    # Steady: the sum and each host.
    assert str(totals.loc[3, "steady_reason"])
    # The CLI's line after each point.
    lines = {o.hosts: headline(o) for o in seen.outcomes}
    assert lines[1].startswith(f"{totals.loc[1, 'iops']:,.0f} IOPS · ")
    assert lines[3].startswith(f"{totals.loc[3, 'iops']:,.0f} IOPS, sum of 3 hosts · ")
