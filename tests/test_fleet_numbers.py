"""A point on several hosts: one cluster total over the window all hosts ran, hosts that differ, every host's logs.

The runs here are real fio client/server runs on "hosts" that are this
machine (tests/fakehosts.py): fio's client drives one fio server per host, as
over SSH. The cluster's numbers are computed a second time from the raw files
of a point (fio's JSON and each host's logs, read here with ``json`` and
``str.split``, not with iobench's readers) and compared with
``point_totals``. The same on namespace hosts with their own sshd:
tests/test_fleet_e2e.py.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fakehosts import LocalHosts

import iobench
from iobench.matrix.model import load_matrix
from iobench.planner.plans import PlannedRun
from iobench.report.page import write_report
from iobench.results import hostoutliers
from iobench.results.points import point_totals, summarize
from iobench.runner.sweep import NullProgress, PointOutcome
from iobench.runner.sweep import run as run_sweep


def _matrix(
    tmp_path: Path, hosts: dict[str, str], fio: str, axes: str = "iodepth: [1]\n", repeat: int = 1
) -> Path:
    """A null-engine matrix over fake hosts, each with its own target (``name -> size``) unless ``shared``."""
    entries = "".join(
        f"  - {{name: {name}, ssh: root@{name}, targets: [{{path: {path}, size: {size}}}]}}\n"
        for name, (path, size) in ((n, _target(tmp_path, n, s)) for n, s in hosts.items())
    )
    text = (
        f"version: 1\nname: fleet\nrepeat: {repeat}\nfio:\n  ioengine: null\n  rw: randread\n  bs: 4k\n"
        + textwrap.indent(textwrap.dedent(fio), "  ")
        + "hosts:\n"
        + entries
        + "matrix:\n"
        + textwrap.indent(axes, "  ")
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path


def _target(tmp_path: Path, name: str, size: str) -> tuple[Path, str]:
    shared, _, size = size.rpartition(":")
    return (tmp_path / f"{shared or name}.dat"), size


class Outcomes(NullProgress):
    """Keeps every point's outcome, as the CLI's displays get it."""

    def __init__(self) -> None:
        self.outcomes: list[PointOutcome] = []

    def point_finished(self, run: PlannedRun, outcome: PointOutcome) -> None:
        self.outcomes.append(outcome)


def _run(matrix: Path, tmp_path: Path, progress: Any = None) -> Path:
    result = run_sweep(
        load_matrix(matrix),
        out=tmp_path / "results",
        connector=LocalHosts(tmp_path / "homes"),
        progress=progress,
    )
    assert result.counts == {"ok": len(result.plan.runs)}
    return Path(result.run_dir)


# --- the cluster's numbers, from the raw files --------------------------------------------------


def _json(path: Path) -> dict[str, Any]:
    text = path.read_text()
    start = next(i for i, line in enumerate(text.splitlines(keepends=True)) if line.startswith("{"))
    doc: dict[str, Any] = json.loads("".join(text.splitlines(keepends=True)[start:]))
    return doc


def _log(path: Path) -> list[tuple[int, float]]:
    rows = [line.split(",") for line in path.read_text().splitlines() if line.strip()]
    return [(int(r[0]), float(r[1])) for r in rows]


def raw_cluster(point_dir: Path, window_ms: float = 1000.0) -> dict[str, Any]:
    """The rule of docs/numbers.md, by hand, for a point of one job per host reading (one section each)."""
    doc = _json(point_dir / "fio.json")
    hosts = {}
    for entry in doc["client_stats"]:
        if entry["jobname"] == "All clients":
            continue
        client = entry["hostname"]  # host-a: the name fio gave the host's logs
        runtime = max(entry[d]["runtime"] for d in ("read", "write", "trim"))
        end = max(t for t, _ in _log(point_dir / f"{entry['jobname']}_lat.1.log.{client}"))
        samples = _log(point_dir / f"{entry['jobname']}_iops.1.log.{client}")
        hosts[client] = {
            "ios": entry["read"]["total_ios"],
            "start": end - runtime,
            "end": end,
            "samples": samples,
            "bins": entry["read"]["clat_ns"]["bins"],
        }
    lo = max(h["start"] for h in hosts.values())
    hi = min(h["end"] for h in hosts.values())
    counted = 0.0
    for h in hosts.values():
        times, counts, previous, count, rate = [h["start"]], [0.0], h["start"], 0.0, 0.0
        for t, rate in h["samples"]:
            if not h["start"] < t <= h["end"]:
                continue
            covered = t - previous
            if covered >= 1.5 * window_ms:
                covered = window_ms
            count += rate * covered / 1000.0
            times.append(t)
            counts.append(count)
            previous = t
        times.append(h["end"])
        counts.append(count + rate * (h["end"] - previous) / 1000.0)
        if counts[-1] > 0:
            share = (np.interp(hi, times, counts) - np.interp(lo, times, counts)) / counts[-1]
        else:
            share = (hi - lo) / (h["end"] - h["start"])
        counted += h["ios"] * share
    merged: Counter[int] = Counter()
    for h in hosts.values():
        merged.update({int(k): int(v) for k, v in h["bins"].items()})
    total, running, p99 = sum(merged.values()), 0, None
    for value in sorted(merged):
        running += merged[value]
        if running >= 0.99 * total:
            p99 = value / 1000.0
            break
    starts = [h["start"] for h in hosts.values()]
    return {
        "iops": counted / ((hi - lo) / 1000.0),
        "p99_us": p99,
        "window_s": (hi - lo) / 1000.0,
        "start_skew_ms": max(starts) - min(starts),
        "host_iops": {c[len("host-") :]: h["ios"] for c, h in hosts.items()},
        "spans_s": {c[len("host-") :]: (h["end"] - h["start"]) / 1000.0 for c, h in hosts.items()},
    }


@pytest.fixture(scope="module")
def unequal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three hosts at 500 IOPS each over 512, 1536 and 1024 reads: they end about 1, 3 and 2 s after starting."""
    tmp_path = tmp_path_factory.mktemp("unequal")
    fio = "rate_iops: 500\nlog_avg_msec: 250\n"
    return _run(_matrix(tmp_path, {"a": "2M", "b": "6M", "c": "4M"}, fio), tmp_path)


@pytest.mark.fio
def test_the_cluster_of_hosts_with_unequal_runtimes_is_all_hosts_over_their_common_window(
    unequal: Path,
) -> None:
    df = iobench.load(unequal)
    [cluster] = point_totals(df).to_dict("records")
    raw = raw_cluster(unequal / "points" / "0001-r1", window_ms=250.0)
    assert cluster["hosts"] == 3 and cluster["host"] == "a+b+c"
    assert cluster["iops"] == pytest.approx(raw["iops"], rel=0.01)
    assert cluster["clat_p99_us"] == pytest.approx(raw["p99_us"], rel=0.01)
    assert cluster["window_s"] == pytest.approx(raw["window_s"], abs=0.002)
    assert cluster["start_skew_ms"] == pytest.approx(raw["start_skew_ms"], abs=2.0)
    # What it means: three hosts held at 500 IOPS each did 1,500 together while all three ran;
    # fio's rule over all of them (every I/O over the longest runtime) would say 1,000.
    assert cluster["iops"] == pytest.approx(1500, rel=0.05)
    assert cluster["total_ios"] == 3072 and cluster["total_ios"] * 1000 / cluster["runtime_ms"] < 1050
    # The window is the shortest host's run; its share of the longest host's run is the overlap.
    spans = raw["spans_s"]
    assert cluster["window_s"] <= min(spans.values()) + 0.002
    assert cluster["overlap_pct"] == pytest.approx(100 * cluster["window_s"] / max(spans.values()), rel=0.01)
    assert cluster["overlap_pct"] < 50 and "host-overlap" in str(df["validity"].iloc[0]).split()
    # Each host on its own is fio's group rule on its jobs.
    each = point_totals(df, by=["host"]).set_index("host")
    assert each["hosts"].tolist() == [1, 1, 1]
    for host, ios in raw["host_iops"].items():
        assert each.loc[host, "total_ios"] == ios
        assert each.loc[host, "iops"] == pytest.approx(ios / spans[host], rel=0.01)


@pytest.mark.fio
def test_summary_report_and_figure_say_the_cluster_number_and_its_hosts(
    unequal: Path, tmp_path: Path
) -> None:
    df = iobench.load(unequal)
    cluster = point_totals(df)["iops"].iloc[0]
    summary = summarize(df)
    assert summary["hosts"].tolist() == [3]
    assert summary["iops_mean"].iloc[0] == pytest.approx(cluster, rel=1e-12)
    report = write_report(unequal, tmp_path / "report")
    html = report.html.read_text()
    assert f"{cluster:,.0f}" in html and "sum of 3 hosts" in html
    csv = pd.read_csv(tmp_path / "report" / "summary.csv")
    assert csv["iops_mean"].iloc[0] == pytest.approx(cluster, rel=1e-9) and csv["hosts"].iloc[0] == 3


# --- equal runtimes, and the headline -------------------------------------------------------------


@pytest.mark.fio
def test_the_headline_is_the_cluster_total_and_names_its_hosts(tmp_path: Path) -> None:
    seen = Outcomes()
    run_dir = _run(
        _matrix(tmp_path, {"a": "8M", "b": "8M", "c": "8M"}, "runtime: 2\ntime_based: 1\nrate_iops: 2000\n"),
        tmp_path,
        seen,
    )
    df = iobench.load(run_dir)
    [cluster] = point_totals(df).to_dict("records")
    raw = raw_cluster(run_dir / "points" / "0001-r1")
    assert cluster["iops"] == pytest.approx(raw["iops"], rel=0.01)
    assert cluster["clat_p99_us"] == pytest.approx(raw["p99_us"], rel=0.01)
    # Started one after another by one fio client: the window and the skew fit in the longest span.
    assert cluster["start_skew_ms"] >= 0 and cluster["window_s"] > 0 and 0 < cluster["overlap_pct"] <= 100
    longest_s = cluster["window_s"] * 100 / cluster["overlap_pct"]
    assert cluster["window_s"] + cluster["start_skew_ms"] / 1000 <= longest_s + 0.001
    assert cluster["iops"] == pytest.approx(6000, rel=0.05)
    [outcome] = seen.outcomes
    assert outcome.hosts == 3 and outcome.iops == pytest.approx(cluster["iops"], rel=1e-9)
    from iobench.cli.console import headline

    assert headline(outcome).startswith(f"{cluster['iops']:,.0f} IOPS, sum of 3 hosts · ")


# --- every host's time series -------------------------------------------------------------------


@pytest.mark.fio
def test_hosts_sharing_one_target_path_keep_their_own_time_series(tmp_path: Path) -> None:
    """Two hosts, one target path (as /dev/nvme0n1 on every host of a fleet): both series, each its own."""
    run_dir = _run(
        _matrix(tmp_path, {"a": "shared:2M", "b": "shared:6M"}, "rate_iops: 400\nlog_avg_msec: 500\n"),
        tmp_path,
    )
    point = run_dir / "points" / "0001-r1"
    assert {p.name for p in point.glob("shared.dat_iops.*")} == {
        "shared.dat_iops.1.log.host-a",
        "shared.dat_iops.1.log.host-b",
    }
    ts = iobench.timeseries(run_dir)
    iops = ts[ts["metric"].eq("iops")]
    assert set(iops["host"]) == {"a", "b"} and set(iops["jobname"]) == {"shared.dat"}
    by_host = {h: g.sort_values("t_s") for h, g in iops.groupby("host")}
    # a read 512 I/Os, b 1,536, at the same rate: their own samples, not one overwritten.
    assert by_host["a"]["t_s"].max() < by_host["b"]["t_s"].max()
    assert len(by_host["b"]) > len(by_host["a"])
    for host, ios in (("a", 512), ("b", 1536)):
        logged = float((by_host[host]["value"] * 0.5).sum())  # each sample: 0.5 s at its rate
        assert ios * 0.6 < logged <= ios * 1.02
    # On one clock: both start at or after the point's origin, b's time continues past a's end.
    spans = iobench.timeseries(run_dir).attrs.get("spans")
    assert spans is not None and {s["host"] for s in spans} == {"a", "b"}
    assert all(s["start_s"] >= 0 for s in spans)
    end_a = max(s["end_s"] for s in spans if s["host"] == "a")
    assert max(s["end_s"] for s in spans if s["host"] == "b") > end_a
    # The frame's cluster is both hosts over the window they shared: 2 × 400 IOPS.
    cluster = point_totals(iobench.load(run_dir))
    assert cluster["iops"].iloc[0] == pytest.approx(800, rel=0.05)


# --- hosts that differ ---------------------------------------------------------------------------


def _hosts_frame(iops: dict[str, float], p99_us: dict[str, float] | None = None) -> pd.DataFrame:
    """One point × repeat, one job per host reading for 10 s at ``iops``, its completions all at ``p99_us``."""
    rows = []
    for index, (host, rate) in enumerate(iops.items()):
        latency_ns = int((p99_us or {}).get(host, 100.0) * 1000)
        rows.append(
            {
                "run_id": "r",
                "point": 1,
                "repeat": 1,
                "host": host,
                "jobname": "nvme0n1",
                "job_index": index,
                "direction": "read",
                "status": "ok",
                "iops": rate,
                "total_ios": int(rate * 10),
                "runtime_ms": 10_000,
                "clat_bins": f"{latency_ns}:{int(rate * 10)}",
            }
        )
    frame = pd.DataFrame(rows)
    return frame.astype({"point": "Int64", "repeat": "Int64", "total_ios": "Int64", "runtime_ms": "Int64"})


def test_a_host_far_from_the_others_is_named_with_its_figures() -> None:
    uniform = {f"h{i:02d}": 10_000.0 + 37 * i for i in range(8)}
    assert hostoutliers.outliers(_hosts_frame(uniform))["host_outliers"].tolist() == [""]
    slow = {**uniform, "h05": 5_000.0}
    [found] = hostoutliers.outliers(_hosts_frame(slow)).to_dict("records")
    assert found["host_outliers"] == "h05"
    assert found["host_outliers_detail"].startswith("h05: IOPS 5,000, 50 % below the hosts' median of 10,")
    laggard = hostoutliers.outliers(_hosts_frame(uniform, {"h02": 900.0, "h06": 100.0}))
    assert (
        laggard["host_outliers"].tolist() == ["h02"]
        and "p99 900 µs" in laggard["host_outliers_detail"].iloc[0]
    )


def test_hosts_within_a_few_percent_are_not_outliers_even_with_a_tiny_spread() -> None:
    # Seven hosts identical to the I/O, one 4 % off: 4 % is infinitely many MADs of 0, and no finding.
    same = {f"h{i}": 10_000.0 for i in range(7)} | {"h7": 10_400.0}
    assert hostoutliers.outliers(_hosts_frame(same))["host_outliers"].tolist() == [""]
    # Two hosts cannot be judged: each is as far from their median as the other.
    assert hostoutliers.outliers(_hosts_frame({"a": 1.0, "b": 100.0}))["host_outliers"].isna().all()


def test_the_rule_is_the_median_and_its_mads() -> None:
    values = pd.Series({"a": 100.0, "b": 102.0, "c": 98.0, "d": 101.0, "e": 99.0, "f": 60.0})
    [(host, value, median, mads)] = hostoutliers.judge_hosts(values)
    assert (host, value) == ("f", 60.0)
    # the MAD (1.5) is taken as at least 3 % of the median
    assert median == 99.5 and mads == pytest.approx(39.5 / (0.03 * 99.5))
    # Just inside the limit: 5 MADs away is not "more than 5".
    edge = pd.Series({"a": 100.0, "b": 110.0, "c": 90.0, "d": 100.0, "e": 150.0})
    assert hostoutliers.judge_hosts(edge) == []


@pytest.mark.parametrize(
    ("off", "far"), [(1.10, False), (0.90, False), (1.15, False), (1.20, True), (0.8, True)]
)
def test_among_three_hosts_one_is_not_far_for_being_ten_percent_off(off: float, far: bool) -> None:
    """Two hosts that agree make the MAD 0: only its floor keeps a host 10 % off from being far."""
    values = pd.Series({"a": 1000.0, "b": 1000.0, "c": 1000.0 * off})
    assert bool(hostoutliers.judge_hosts(values)) is far
    assert bool(hostoutliers.judge_hosts(pd.concat([values, pd.Series({"d": 1000.0, "e": 1000.0})]))) is far


def _repeats(values: dict[str, list[float]]) -> pd.DataFrame:
    """``_hosts_frame`` over repeats: host -> its IOPS in each repeat."""
    count = len(next(iter(values.values())))
    frames = [_hosts_frame({h: v[r] for h, v in values.items()}).assign(repeat=r + 1) for r in range(count)]
    return pd.concat(frames, ignore_index=True).astype({"repeat": "Int64"})


def test_the_hosts_figure_marks_what_it_draws_with_the_rule_in_its_caption() -> None:
    """c is far in its first repeat only: the frame names it there; the mean drawn is not far, so not red."""
    from matplotlib.colors import to_hex

    from iobench.plots.hostvalues import OUTLIER_COLOUR, hosts

    once = _repeats(
        {"a": [1000, 1000, 1000], "b": [1010, 1010, 1010], "c": [600, 1030, 1030], "d": [1020] * 3}
    )
    per_repeat = hostoutliers.outliers(once)
    assert per_repeat["host_outliers"].tolist() == ["c", "", ""]
    fig = hosts(once, latency=None)
    [axis] = [ax for ax in fig.axes if ax.get_visible() and ax.get_ylabel()]
    reds = [c for c in axis.collections if to_hex(c.get_facecolor()[0]) == OUTLIER_COLOUR]
    assert reds == [] and not [t for t in axis.texts if t.get_text() == "c"]
    assert hostoutliers.RULE in " ".join(" ".join(t.get_text() for t in fig.texts).split())
    always = _repeats({"a": [1000] * 2, "b": [1010] * 2, "c": [600, 620], "d": [1020] * 2})
    fig = hosts(always, latency=None)
    [axis] = [ax for ax in fig.axes if ax.get_visible() and ax.get_ylabel()]
    [red] = [c for c in axis.collections if to_hex(c.get_facecolor()[0]) == OUTLIER_COLOUR]
    assert red.get_offsets()[0][1] == pytest.approx(610.0) and [t.get_text() for t in axis.texts] == ["c"]


# --- comparing runs on different numbers of hosts -----------------------------------------------


@pytest.mark.fio
def test_compare_states_that_a_sum_over_hosts_is_not_one_hosts_number(tmp_path: Path) -> None:
    fio = "runtime: 1\ntime_based: 1\nrate_iops: 1000\n"
    hosts = _run(_matrix(tmp_path / "hosts", {"a": "8M", "b": "8M"}, fio, repeat=2), tmp_path / "hosts")
    local = tmp_path / "local.yaml"
    local.write_text(
        f"version: 1\nname: local\nrepeat: 2\ntargets: [{{path: {tmp_path / 'l.dat'}, size: 8M}}]\n"
        "fio:\n  ioengine: null\n  rw: randread\n  bs: 4k\n"
        + textwrap.indent(fio, "  ")
        + "matrix:\n  iodepth: [1]\n"
    )
    alone = run_sweep(load_matrix(local), out=tmp_path / "results").run_dir
    result = iobench.compare(alone, hosts)
    iops = result[result["metric"].eq("iops")].iloc[0]
    assert pd.isna(iops["verdict"]) and pd.isna(iops["ratio"])
    assert iops["reason"].startswith("not compared: A ran on this machine or one host, B on 2 hosts at once")
    assert iops["b_mean"] == pytest.approx(2 * iops["a_mean"], rel=0.1)  # both shown, side by side
    facts = {f["fact"]: f for f in result.attrs["machines"]}
    assert facts["hosts per point"]["a"] == "1" and facts["hosts per point"]["b"] == "2"
    assert facts["host"]["b"] == "a, b" and facts["host"]["differs"]


# --- the figures ---------------------------------------------------------------------------------


def _fleet_frame(
    counts: list[int], iodepths: list[int], bss: list[int], slow: str | None = None
) -> pd.DataFrame:
    """A scale-out sweep as the frame holds it: each point on the first N of 32 hosts, 2 repeats, one job each.

    Each host does ``10,000 × iodepth`` IOPS until the backend's 200,000 are shared out; ``slow`` gets half.
    """
    rows = []
    point = 0
    for count in counts:
        for iodepth in iodepths:
            for bs in bss:
                point += 1
                for repeat in (1, 2):
                    each = min(10_000.0 * iodepth, 200_000.0 / count) * (1 + 0.01 * repeat)
                    for index in range(count):
                        host = f"h{index:02d}"
                        rate = each / 2 if host == slow else each
                        latency = int(1e9 * iodepth / rate)
                        rows.append(
                            {
                                "run_id": "fleet",
                                "point": point,
                                "repeat": repeat,
                                "host": host,
                                "host_count": count,
                                "iodepth": iodepth,
                                "bs": bs,
                                "jobname": "nvme0n1",
                                "job_index": index,
                                "direction": "read",
                                "status": "ok",
                                "iops": rate,
                                "total_ios": int(rate * 10),
                                "runtime_ms": 10_000,
                                "window_ios": rate * 9.9,
                                "window_s": 9.9,
                                "clat_bins": f"{latency}:{int(rate * 10)}",
                            }
                        )
    frame = pd.DataFrame(rows).astype(
        {"point": "Int64", "repeat": "Int64", "total_ios": "Int64", "runtime_ms": "Int64"}
    )
    judged = hostoutliers.outliers(frame)
    return frame.merge(judged, on=["run_id", "point", "repeat", "direction"], how="left")


def test_the_cluster_of_a_sweep_and_each_host_are_drawn_with_the_slow_host_in_red(tmp_path: Path) -> None:
    from matplotlib.collections import PathCollection

    from iobench.plots import figures_for, hosts, scale_out

    frame = _fleet_frame([1, 2, 4, 8], [1, 4], [4096], slow="h01")
    assert {"scale-out", "hosts"} <= set(figures_for(frame))
    fig = scale_out(frame)
    cluster, p99, each = fig.axes[:3]
    line = cluster.containers[0].lines[0]  # the first line's data: iodepth=1
    totals = point_totals(frame)
    at_one = totals[totals["iodepth"].eq(1)].groupby("host_count")["iops"].mean()
    assert list(line.get_xdata()) == [1, 2, 4, 8]
    assert list(line.get_ydata()) == pytest.approx(at_one.tolist(), rel=1e-9)
    reds = [
        c
        for c in each.collections
        if isinstance(c, PathCollection) and c.get_label().startswith("a host far")
    ]
    assert reds and {t.get_text() for t in each.texts} == {"h01"}
    assert "h01" in str(frame["host_outliers"].dropna().unique())
    # Past 2 hosts each host's own: one panel per host count, h01 named wherever it is judged.
    fig = hosts(frame)
    assert "(8 hosts)" in fig.get_suptitle()
    named = {t.get_text() for ax in fig.axes for t in ax.texts}
    assert named == {"h01"}


@pytest.mark.slow
def test_host_figures_of_a_big_fleet_stay_figures(tmp_path: Path) -> None:
    from iobench.plots import hosts, save_figure, scale_out
    from iobench.plots.limits import MAX_PIXELS

    frame = _fleet_frame(
        [1, 2, 4, 8, 16, 32], [1, 2, 4, 8, 16, 32, 64], [4096, 8192, 16384, 65536, 131072, 1048576]
    )
    for name, fig in (("hosts", hosts(frame)), ("scale-out", scale_out(frame))):
        path = save_figure(fig, tmp_path / f"{name}.png")
        width, height = (
            int.from_bytes(path.read_bytes()[16:20], "big"),
            int.from_bytes(path.read_bytes()[20:24], "big"),
        )
        assert 0 < width <= MAX_PIXELS and 0 < height <= MAX_PIXELS, (name, width, height)


# --- the rule's pieces --------------------------------------------------------------------------


def test_a_jobs_count_over_time_follows_its_log_and_carries_the_last_rate_to_its_end() -> None:
    from iobench.results.hostspan import cumulative, in_window

    # Samples at 1, 2, 3 s of 100, 200, 100 I/O/s; the job ran from 0 to 3.5 s.
    times, counts = cumulative(np.array([1.0, 2.0, 3.0]), np.array([100.0, 200.0, 100.0]), 0.0, 3.5, 1.0)
    assert times.tolist() == [0.0, 1.0, 2.0, 3.0, 3.5] and counts.tolist() == [0, 100, 300, 400, 450]
    # fio said 900 I/Os: the log's shape, fio's amount. Between 1 and 2 s: 200 of 450 → 400.
    assert in_window(times, counts, 900.0, 1.0, 2.0) == pytest.approx(400.0)
    # A sample 3 windows after the previous one follows two windows without I/O: it covers one.
    times, counts = cumulative(np.array([1.0, 4.0]), np.array([100.0, 100.0]), 0.0, 4.0, 1.0)
    assert counts.tolist() == [0, 100, 200, 200]
    # No samples: the I/Os spread evenly over the span.
    times, counts = cumulative(np.array([]), np.array([]), 0.0, 2.0, 1.0)
    assert in_window(times, counts, 1000.0, 0.5, 1.5) == pytest.approx(500.0)


def test_the_window_is_the_latest_start_to_the_earliest_end() -> None:
    from iobench.results.hostspan import host_windows

    spans = pd.DataFrame(
        {
            "point": [1, 1, 1, 1],
            "repeat": [1, 1, 1, 1],
            "host": ["a", "a", "b", "c"],
            "jobname": ["x"] * 4,
            "job": [1, 2, 1, 1],
            "start_s": [0.00, 0.02, 0.05, 0.10],
            "end_s": [3.0, 3.1, 2.0, 4.0],
        }
    )
    [w] = host_windows(spans).to_dict("records")
    assert (w["from_s"], w["to_s"], w["hosts"]) == (0.10, 2.0, 3)
    assert w["window_s"] == pytest.approx(1.9) and w["start_skew_ms"] == pytest.approx(100.0)
    assert w["overlap_pct"] == pytest.approx(100 * 1.9 / 3.9)  # c's span, 0.1 to 4.0, is the longest


def test_a_host_not_steady_makes_its_point_not_steady_and_is_named() -> None:
    from iobench.results.points import window_totals
    from iobench.results.steady import host_verdicts, judge_windows, with_host_verdicts

    rows = []
    for host, values in (("a", [1000] * 8), ("b", [1000, 1000, 1000, 1000, 600, 500, 400, 300])):
        for window, value in enumerate(values, start=1):
            rows.append(
                {
                    "point": 1,
                    "repeat": 1,
                    "host": host,
                    "jobname": "nvme0n1",
                    "job": 1,
                    "direction": "read",
                    "window": window,
                    "t_s": float(window),
                    "metric": "iops",
                    "value": float(value),
                }
            )
    series = pd.DataFrame(rows).astype(
        {"point": "Int64", "repeat": "Int64", "job": "Int64", "window": "Int64"}
    )
    per_host = host_verdicts(series).set_index("host")
    assert bool(per_host.loc["a", "steady"]) and not bool(per_host.loc["b", "steady"])
    assert judge_windows(window_totals(series, by=["host"]), by=["host"])["host"].tolist() == ["a", "b"]
    combined = with_host_verdicts(judge_windows(window_totals(series)), series, pd.DataFrame())
    assert combined["steady"].tolist() == [False]
    assert combined["steady_reason"].iloc[0].startswith("1 host not steady; host b: IOPS ")
