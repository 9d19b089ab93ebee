"""System telemetry of a point: the samples (long form), the per-point summary and the bottleneck verdict.

The runner samples the system while each point runs
(:mod:`iobench.system.sampler`) and :func:`~iobench.results.samples.build_table`
turns the raw counters into one row per sample interval × entity × metric, saved
as ``points/<key>/telemetry.parquet`` with the point's context (what was
watched, the measured window, notes about counters that were missing) in the
file's metadata. :func:`telemetry` reads them all back; :func:`with_telemetry` adds the
per-point summary columns to the tidy frame. docs/telemetry.md has the rules and
the thresholds; they live here as constants and nowhere else.

Rates are taken over each interval between two samples. ``t_s`` is the end of
the interval, in seconds from the start of the point's measured window (fio's
runtime, ramp excluded), clipped to the window; the intervals tile the window.
A summary is a mean over the window (:func:`_means` has the rules): device
and interrupt counts over fio's runtime, CPU and thread shares weighted by each
interval's time inside the window.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iobench.errors import ResultsError
from iobench.results.points import TELEMETRY, TELEMETRY_TEXT, parameter_columns, rate_totals
from iobench.results.samples import (
    point_files,
    read_point,
)
from iobench.store.inventory import take_inventory
from iobench.store.records import PointMeta
from iobench.store.rundir import RunDir
from iobench.store.untrusted import MATRIX, read_text
from iobench.system.pcie import link_bandwidth

# --- thresholds of the verdict (docs/telemetry.md) ---------------------------------
#: The point's CPUs count as saturated from this mean busy share (%).
CPU_BUSY_PCT = 95.0
#: One thread of the point (fio's, or a kernel thread) counts as saturating its CPU from this share (%).
THREAD_BUSY_PCT = 95.0
#: A device counts as saturated from this utilisation (% of the time with I/O in flight).
DEVICE_UTIL_PCT = 95.0
#: Deeper queue, no more I/Os: a point whose iodepth is at least ``AWAIT_DEPTH_RATIO`` × the previous
#: one's, with device IOPS up by less than ``AWAIT_IOPS_GAIN`` and await up by at least ``AWAIT_RATIO`` ×.
AWAIT_DEPTH_RATIO = 2.0
AWAIT_IOPS_GAIN = 0.10
AWAIT_RATIO = 1.5
#: A CPU serving at least ``IRQ_SHARE_PCT`` % of the target devices' interrupts, spending at least
#: ``IRQ_CPU_PCT`` % of its time in irq + softirq, makes the point interrupt-bound.
IRQ_SHARE_PCT = 10.0
IRQ_CPU_PCT = 50.0
#: Completions served on a node other than the device's own from this share (%) make it ``remote-irq``.
REMOTE_IRQ_PCT = 50.0
#: A PCIe link counts as saturated from this share of its bandwidth (%).
LINK_PCT = 90.0
#: Device vs fio I/O counts: outside ``[1 / MISMATCH, MISMATCH]`` the difference is explained in a note.
MISMATCH = 1.25
#: A process that is neither fio's nor the kernel's, using this much of a CPU, is named in a note.
OTHER_THREAD_PCT = 50.0

#: Per point × repeat × direction.
DIRECTION_COLUMNS: tuple[str, ...] = ("dev_iops", "dev_bw_bytes", "dev_await_ms", "dev_fio_ratio")
#: Every column :func:`with_telemetry` adds to the tidy frame, in frame order (listed once, in points).
SUMMARY_COLUMNS: tuple[str, ...] = TELEMETRY
#: Per point × repeat.
POINT_COLUMNS: tuple[str, ...] = tuple(c for c in TELEMETRY if c not in DIRECTION_COLUMNS)
VERDICTS: tuple[str, ...] = (
    "cpu:sys",
    "cpu:user",
    "link",
    "device",
    "interrupts",
    "remote-irq",
    "none-found",
)

_DIRECTION_PREFIX = {"read": "read", "write": "write", "trim": "discard"}


def _run_dir(run: Any) -> RunDir:
    path = getattr(run, "run_dir", run)
    if isinstance(path, RunDir):
        return path
    return RunDir.open(path)


def _empty() -> pd.DataFrame:
    types = {
        "point": "Int64",
        "repeat": "Int64",
        "host": "string",
        "t_s": "float64",
        "source": "string",
        "entity": "string",
        "node": "Int64",
        "metric": "string",
        "value": "float64",
    }
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in types.items()})


Points = Iterable[tuple[Path, PointMeta]]
"""A run's saved points with their records (:meth:`RunDir.point_metas`, or an inventory's)."""


def _point_tables(
    run: RunDir, points: Points | None, unreadable: dict[tuple[int, int], str]
) -> Iterable[tuple[PointMeta, str | None, Any, dict[str, Any]]]:
    """Every site's samples of every point: its meta, the site's host (None: this machine), table, context.

    A file that cannot be read goes to ``unreadable``, with why.
    """
    listed = [
        (meta, host, path)
        for point_dir, meta in (take_inventory(run).readable() if points is None else points)
        for host, path in point_files(point_dir)
    ]
    # pyarrow decodes a file without the GIL: two threads read 5,000 small files a fifth faster.
    with ThreadPoolExecutor(READERS) as pool:
        for (meta, host, _), read in zip(
            listed, pool.map(_read_or_why, [p for _, _, p in listed]), strict=True
        ):
            if isinstance(read, ResultsError):
                unreadable[(meta.point, meta.repeat)] = str(read)
                continue
            yield meta, host, *read


READERS = 2
"""Threads reading a run's telemetry files."""


def _read_or_why(path: Path) -> tuple[Any, dict[str, Any]] | ResultsError:
    try:
        return read_point(path)
    except ResultsError as exc:
        return exc


def telemetry(run: Any) -> pd.DataFrame:
    """Every telemetry sample of a run, in long form (docs/telemetry.md).

    Parameters
    ----------
    run
        A run directory (path), or what :func:`iobench.run` returned.

    Returns
    -------
    pandas.DataFrame
        ``point``, ``repeat``, ``t_s`` (end of the sample interval, seconds
        from the start of the point's measured window), ``source`` (``cpu``,
        ``thread``, ``disk``, ``irq``, ``mem``), ``entity`` (CPU number, thread
        name, device, interrupt line), ``node`` (the CPU's, the thread's last
        CPU's, the device's home node, the node of the CPU that served the
        interrupt; NA for memory), ``metric`` and ``value``. Empty (with these
        columns) when the run recorded none (``telemetry: false``).
        ``attrs["notes"]`` names each telemetry file left out because it
        cannot be read.

    Raises
    ------
    ResultsError
        When ``run`` is not a run directory.

    Examples
    --------
    >>> t = iobench.telemetry("results/demo-20240101-120000")        # doctest: +SKIP
    >>> t[(t.source == "cpu") & (t.metric == "busy_pct")].groupby("entity").value.mean()  # doctest: +SKIP
    """
    import pyarrow as pa

    unreadable: dict[tuple[int, int], str] = {}
    tables = [
        table.add_column(2, "host", pa.array([host] * table.num_rows, pa.string()))
        for _, host, table, _ in _point_tables(_run_dir(run), None, unreadable)
    ]
    frame: pd.DataFrame = pa.concat_tables(tables).to_pandas() if tables else _empty()
    for column in ("point", "repeat", "node"):
        frame[column] = frame[column].astype("Int64")
    for column in ("host", "source", "entity", "metric"):
        frame[column] = frame[column].astype("string")
    frame = frame.reset_index(drop=True)
    frame.attrs["notes"] = list(unreadable.values())
    return frame


# --- the summary -----------------------------------------------------------------------


Means = dict[tuple[str, str], dict[str, float]]
"""(source, metric) → entity → its mean over the window."""


@dataclass
class _Point:
    """One point × repeat's telemetry, averaged over its window."""

    point: int
    repeat: int
    host: str | None
    context: dict[str, Any]
    means: Means
    nodes: dict[tuple[str, str, str], int | None]  # (source, entity, metric) → node
    notes: list[str]

    def values(self, source: str, metric: str) -> dict[str, float]:
        return self.means.get((source, metric), {})

    def devices(self, role: str) -> list[str]:
        return [n for n, f in (self.context.get("devices") or {}).items() if f.get("role") == role]


_COUNTED = ("_iops", "_bytes_s", "_merges_s", "util_pct", "queue_depth")

Nodes = dict[tuple[str, str, str], int | None]
"""(source, entity, metric) → the entity's node."""


def _counted(source: str, metric: str) -> bool:
    """Whether a metric is a rate of a counter (averaged over the window) rather than a share."""
    return source == "irq" or (source == "disk" and metric.endswith(_COUNTED))


def _ratio(total: float, over: float) -> float:
    """``total / over`` as numpy divides floats: ±inf, or NaN for 0/0, when ``over`` is 0."""
    if over:
        return total / over
    return math.nan if total == 0 or math.isnan(total) else math.copysign(math.inf, total)


def _means(table: Any, context: Mapping[str, Any]) -> tuple[Means, Nodes]:
    """A point × repeat's mean of each source × entity × metric over its measured window.

    Rates of counters (a device's I/Os, bytes, merges, busy time and queue
    time; interrupts) count every interval that touches the window in full —
    fio does no I/O outside its window — except the first one's part before
    the window when fio ramped up (``ramp_s``), and are divided by the window's
    length: the device's own count over fio's runtime. Awaits are weighted by
    the I/Os behind them. Shares (CPU, threads) are weighted by each
    interval's time inside the window; a thread missing from an interval
    counts as 0 there. A missing value adds nothing but its interval's weight.

    A point has a few hundred rows: plain Python over them costs a fraction of
    what a dozen pandas operations on one frame of every point did.
    """
    means: Means = {}
    nodes: Nodes = {}
    intervals = context.get("intervals") or []
    if not intervals or not table.num_rows:
        return means, nodes
    ramped = float(context.get("ramp_s") or 0) > 0
    weights = {
        float(t_s): (float(inside) if ramped and index == 0 else float(length), float(inside))
        for index, (t_s, inside, length) in enumerate(intervals)
    }
    share_total = sum(float(i[1]) for i in intervals)
    window = float(context.get("window_s") or 0.0) or share_total
    columns = [table.column(c).to_pylist() for c in ("t_s", "source", "entity", "node", "metric", "value")]
    groups: dict[tuple[str, Any, str], list[Any]] = {}  # → [Σ value × weight, Σ weight, node]

    def add(
        source: str, entity: Any, metric: str, node: int | None, value: float | None, weight: float
    ) -> None:
        group = groups.setdefault((source, entity, metric), [0.0, 0.0, None])
        if value is not None and not math.isnan(product := value * weight):
            group[0] += product
        group[1] += weight
        if group[2] is None:
            group[2] = node

    ios: dict[tuple[float, Any, str], float | None] = {}
    waits = []
    for t_s, source, entity, node, metric, value in zip(*columns, strict=True):
        weight = weights.get(t_s)
        if weight is None:
            continue
        if source == "disk" and metric.endswith("_iops"):
            ios[(t_s, entity, metric.replace("_iops", "_await_ms"))] = value
        if metric.endswith("_await_ms"):
            waits.append((t_s, source, entity, node, metric, value, weight[0]))
        else:
            add(source, entity, metric, node, value, weight[0] if _counted(source, metric) else weight[1])
    for t_s, source, entity, node, metric, value, counted in waits:
        behind = ios.get((t_s, entity, metric))
        add(
            source,
            entity,
            metric,
            node,
            value,
            counted * (0.0 if behind is None or math.isnan(behind) else behind),
        )
    for (source, entity, metric), (total, weight, node) in groups.items():
        if _counted(source, metric):
            mean = _ratio(total, window)
        elif source == "thread":
            mean = _ratio(total, share_total)
        else:
            mean = total / weight if weight > 0 else math.nan
        if not math.isnan(mean):
            means.setdefault((source, metric), {})[str(entity)] = mean
        nodes[(source, str(entity), metric)] = None if node is None else int(node)
    return means, nodes


def _load_points(run: RunDir, points: Points | None, unreadable: dict[tuple[int, int], str]) -> list[_Point]:
    return [
        _Point(
            meta.point,
            meta.repeat,
            host,
            context,
            *_means(table, context),
            [str(n) for n in context.get("notes") or []],
        )
        for meta, host, table, context in _point_tables(run, points, unreadable)
    ]


def _fmt_cpus(cpus: Sequence[int]) -> str:
    from iobench.system.cpulist import format_cpulist

    return format_cpulist(tuple(sorted(cpus))) or "-"


def _pct(value: float) -> str:
    return f"{value:.0f} %"


@dataclass
class _Verdict:
    name: str | None = None
    reason: str | None = None

    def offer(self, name: str, reason: str) -> None:
        if self.name is None:
            self.name, self.reason = name, reason


class _Judge:
    """The per-point numbers and the verdict of one point × repeat."""

    def __init__(self, p: _Point, links: Mapping[str, Mapping[str, Any]]) -> None:
        self.p = p
        self.links = links
        self.row: dict[str, Any] = {"point": p.point, "repeat": p.repeat}
        self.notes = list(p.notes)

    def cpu(self) -> None:
        busy = self.p.values("cpu", "busy_pct")
        if not busy:
            self.notes.append("no CPU counters (/proc/stat unreadable)")
            return
        mine = [str(c) for c in self.p.context.get("point_cpus") or []]
        mine = [c for c in mine if c in busy] or list(busy)
        self.row["cpu_busy_pct"] = sum(busy[c] for c in mine) / len(mine)
        busiest = max(busy, key=lambda c: busy[c])
        self.row["cpu_busy_max_pct"] = busy[busiest]
        self.row["_busiest_cpu"] = busiest
        for metric in ("system_pct", "user_pct", "irq_pct", "softirq_pct"):
            values = self.p.values("cpu", metric)
            self.row[f"_{metric}"] = sum(values.get(c, 0.0) for c in mine) / len(mine)
        self.row["cpu_sys_pct"] = self.row["_system_pct"]
        self.row["_mine"] = mine
        other = self.p.values("cpu", "other_pct")
        if other:  # runs from before other_pct was sampled have none: NA
            shares = [other.get(c, 0.0) for c in mine]
            self.row["cpu_other_pct"] = sum(shares) / len(shares)
            self.row["cpu_other_max_pct"] = max(shares)

    def threads(self) -> None:
        share = self.p.values("thread", "cpu_pct")
        if not share:
            if self.p.context.get("threads", True):
                self.notes.append("no thread was seen using CPU")
            return
        ranked = sorted(share.items(), key=lambda item: -item[1])
        self.row["top_thread"], self.row["top_thread_pct"] = ranked[0]
        kinds = self.p.context.get("thread_kinds") or {}
        others = [
            f"{name} ({_pct(value)})"
            for name, value in ranked
            if kinds.get(name) == "other" and value >= OTHER_THREAD_PCT
        ]
        top_other = next(((n, v) for n, v in ranked if kinds.get(n) == "other"), None)
        if top_other is not None:
            self.row["cpu_other_top"] = f"{top_other[0]} ({_pct(top_other[1])})"
        if others:
            self.notes.append(
                "other processes used CPU during the point: "
                + ", ".join(others[:3])
                + " (they compete with fio)"
            )

    def disks(self) -> dict[str, dict[str, float]]:
        """Per direction ``dev_iops``, ``dev_bw_bytes``, ``dev_await_ms`` over the targets' devices; util per point."""
        targets = self.p.devices("target")
        if not targets:
            if not any("no block device" in n for n in self.notes):
                self.notes.append("no block device under the targets: no device counters")
            return {}
        out: dict[str, dict[str, float]] = {}
        if not any(d in self.p.values("disk", "util_pct") for d in targets):
            self.notes.append(f"no /proc/diskstats line for {', '.join(targets)}")
            return {}

        def total(metric: str) -> float:
            values = self.p.values("disk", metric)
            return sum(values.get(d, 0.0) for d in targets)

        for direction, prefix in _DIRECTION_PREFIX.items():
            iops = self.p.values("disk", f"{prefix}_iops")
            if not any(d in iops for d in targets):
                continue
            waits = self.p.values("disk", f"{prefix}_await_ms")
            weight = total(f"{prefix}_iops")
            waited = sum(waits.get(d, 0.0) * iops.get(d, 0.0) for d in targets)
            out[direction] = {
                "dev_iops": weight,
                "dev_bw_bytes": total(f"{prefix}_bytes_s"),
                "dev_await_ms": waited / weight if weight > 0 else math.nan,
            }
        util = {d: v for d, v in self.p.values("disk", "util_pct").items() if d in targets}
        busiest = max(util, key=lambda d: util[d])
        self.row["dev_util_pct"] = util[busiest]
        self.row["_util_device"] = busiest
        queue = [v for d, v in self.p.values("disk", "queue_depth").items() if d in targets]
        self.row["_queue"] = max(queue) if queue else math.nan
        all_ios = sum(v["dev_iops"] for v in out.values())
        waited_all = sum(v["dev_await_ms"] * v["dev_iops"] for v in out.values() if v["dev_iops"] > 0)
        self.row["_dev_iops"] = all_ios
        self.row["_dev_await"] = waited_all / all_ios if all_ios > 0 else math.nan
        return out

    def irqs(self) -> None:
        irqs = self.p.context.get("irqs") or {}
        if not irqs:
            return
        rows = [
            (entity, self.p.nodes.get(("irq", entity, metric)), metric, value)
            for (source, metric), values in self.p.means.items()
            if source == "irq"
            for entity, value in values.items()
        ]
        if not rows:
            self.notes.append("the target devices' interrupt lines did not fire during the point")
            return
        devices = self.p.context.get("devices") or {}
        total = remote = 0.0
        known = False
        served: dict[str, float] = defaultdict(float)
        for entity, node, metric, value in rows:
            device = (irqs.get(str(entity).split(" ", 1)[0]) or {}).get("device") or ""
            home = (devices.get(device) or {}).get("home_node")
            total += value
            served[metric.removesuffix("_per_s").removeprefix("cpu")] += value
            if home is not None and node is not None:
                known = True
                remote += value if int(node) != int(home) else 0.0
        if total > 0 and known:
            self.row["irq_remote_pct"] = 100.0 * remote / total
        elif total > 0:
            self.notes.append("the target devices' home node is unknown: irq_remote_pct is NA")
        self.row["_irq_served"] = {cpu: 100.0 * v / total for cpu, v in served.items()} if total > 0 else {}

    def link(self) -> tuple[str, float, float] | None:
        """The busiest PCIe way of the targets' disks: (what, bytes/s one way, its bandwidth one way).

        A disk's way up is as fast as its narrowest link (``link_bw_bytes``);
        disks of the point under one root port also share that port's link.
        PCIe is full duplex: reads and writes are compared with it separately.
        """
        disks = sorted(set(self.p.devices("target")) | set(self.p.devices("disk")))
        reads, writes = self.p.values("disk", "read_bytes_s"), self.p.values("disk", "write_bytes_s")
        moved = {disk: max(reads.get(disk, 0.0), writes.get(disk, 0.0)) for disk in disks}
        ways: list[tuple[str, float, float]] = []
        ports: dict[str, list[str]] = defaultdict(list)
        for disk in disks:
            facts = self.links.get(disk) or {}
            if facts.get("bw") is not None:
                ways.append((disk, moved[disk], float(facts["bw"])))
            if facts.get("root_port") is not None:
                ports[str(facts["root_port"])].append(disk)
        for port, members in ports.items():
            capacity = next(
                (self.links[d].get("port_bw") for d in members if self.links[d].get("port_bw")), None
            )
            if len(members) > 1 and capacity is not None:
                ways.append(
                    (f"root port {port} ({', '.join(members)})", sum(moved[d] for d in members), capacity)
                )
        return max(ways, key=lambda way: way[1] / way[2], default=None)

    def verdict(self, depth_note: str | None) -> None:
        v = _Verdict()
        row = self.row
        busy = row.get("cpu_busy_pct")
        if busy is not None and busy >= CPU_BUSY_PCT:
            kernel = row["_system_pct"] + row["_irq_pct"] + row["_softirq_pct"]
            kind = "cpu:sys" if kernel >= row["_user_pct"] else "cpu:user"
            v.offer(
                kind,
                f"the point's CPUs ({_fmt_cpus([int(c) for c in row['_mine']])}) were {_pct(busy)} busy: "
                f"user {_pct(row['_user_pct'])}, system {_pct(row['_system_pct'])}, irq {_pct(row['_irq_pct'])}, "
                f"softirq {_pct(row['_softirq_pct'])}"
                + (
                    f"; busiest thread {row['top_thread']} ({_pct(row['top_thread_pct'])})"
                    if "top_thread" in row
                    else ""
                ),
            )
        saturating = self._saturating_thread()
        if saturating is not None:
            name, share, system = saturating
            v.offer(
                "cpu:sys" if system >= share / 2 else "cpu:user",
                f"thread {name} used {_pct(share)} of a CPU ({_pct(system)} of it in the kernel): one CPU is its limit",
            )
        link = self.link()
        if link is not None and link[1] >= LINK_PCT / 100 * link[2]:
            disk, moved, capacity = link
            v.offer(
                "link",
                f"{disk} moved {moved / 1e9:.2f} GB/s one way, {_pct(100 * moved / capacity)} of what its PCIe "
                f"link carries ({capacity / 1e9:.2f} GB/s at its current speed and width)",
            )
        util = row.get("dev_util_pct")
        if util is not None and util >= DEVICE_UTIL_PCT:
            v.offer(
                "device",
                f"{row['_util_device']} had I/O in flight {_pct(util)} of the time (queue depth {row['_queue']:.1f}, "
                f"await {row['_dev_await']:.2f} ms)",
            )
        if depth_note is not None:
            v.offer("device", depth_note)
        served = row.get("_irq_served") or {}
        for cpu, share in sorted(served.items(), key=lambda item: -item[1]):
            if share < IRQ_SHARE_PCT:
                break
            irq_time = self._cpu_value(cpu, "irq_pct") + self._cpu_value(cpu, "softirq_pct")
            if irq_time >= IRQ_CPU_PCT:
                v.offer(
                    "interrupts",
                    f"CPU {cpu} served {_pct(share)} of the target devices' interrupts and spent "
                    f"{_pct(irq_time)} of its time in irq and softirq",
                )
        remote = row.get("irq_remote_pct")
        if remote is not None and remote >= REMOTE_IRQ_PCT:
            v.offer(
                "remote-irq",
                f"{_pct(remote)} of the target devices' interrupts (their I/O completions) were served on another "
                "node than the device's",
            )
        v.offer("none-found", self._nothing())
        row["bottleneck"], row["bottleneck_reason"] = v.name, v.reason

    def _cpu_value(self, cpu: str, metric: str) -> float:
        return self.p.values("cpu", metric).get(cpu, 0.0)

    def _saturating_thread(self) -> tuple[str, float, float] | None:
        kinds = self.p.context.get("thread_kinds") or {}
        mine = {
            name: value
            for name, value in self.p.values("thread", "max_thread_pct").items()
            if kinds.get(name) in ("fio", "kernel")
        }
        if not mine or max(mine.values()) < THREAD_BUSY_PCT:
            return None
        name = max(mine, key=lambda n: mine[n])
        threads = max(1.0, self.p.values("thread", "threads").get(name, 1.0))
        system = self.p.values("thread", "system_pct").get(name, 0.0) / threads
        return name, mine[name], system

    def _nothing(self) -> str:
        row = self.row
        parts = []
        if "cpu_busy_pct" in row:
            parts.append(
                f"the point's CPUs {_pct(row['cpu_busy_pct'])} busy (busiest CPU {row['_busiest_cpu']}: "
                f"{_pct(row['cpu_busy_max_pct'])})"
            )
        if "dev_util_pct" in row:
            parts.append(f"{row['_util_device']} util {_pct(row['dev_util_pct'])}")
        if "irq_remote_pct" in row:
            parts.append(f"remote interrupts {_pct(row['irq_remote_pct'])}")
        if "top_thread" in row:
            parts.append(f"busiest thread {row['top_thread']} {_pct(row['top_thread_pct'])}")
        return "no resource reached its threshold: " + ("; ".join(parts) or "nothing was measured")


def _links(machine: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each device's PCIe bandwidth facts from the manifest's topology, where the topology has them (docs/pcie.md).

    ``bw``: the narrowest link on its way up (``pcie.link_bw_bytes``, else its
    own link's); ``root_port`` and ``port_bw``: its root port and that port's
    link, which devices under one port share.
    """
    devices = (machine.get("topology") or {}).get("devices") or []
    found: dict[str, dict[str, Any]] = {}
    for device in devices:
        if not isinstance(device, dict):
            continue
        pcie: dict[str, Any] = device["pcie"] if isinstance(device.get("pcie"), dict) else {}
        link: dict[str, Any] = device["link"] if isinstance(device.get("link"), dict) else {}
        bw = pcie.get("link_bw_bytes") or link.get("bw_bytes")
        if bw is None and link:
            bw = link_bandwidth(link.get("current_speed"), link.get("current_width"))
        hops = [h for h in pcie.get("hops") or [] if isinstance(h, dict)]
        port = next((h for h in hops if h.get("role") == "root-port"), None)
        port_bw = ((port or {}).get("link") or {}).get("bw_bytes")
        if bw is None and port_bw is None:
            continue
        found[str(device.get("name"))] = {"bw": bw, "root_port": device.get("root_port"), "port_bw": port_bw}
    return found


def _mismatch(direction: str, ratio: float, bytes_ratio: float | None) -> str | None:
    """Why the device's I/O count differs from fio's, when it differs by more than :data:`MISMATCH`."""
    if not math.isfinite(ratio) or 1 / MISMATCH <= ratio <= MISMATCH:
        return None
    same_bytes = bytes_ratio is not None and 1 / MISMATCH <= bytes_ratio <= MISMATCH
    if ratio < 1 and same_bytes:
        why = "the same bytes in fewer, larger requests: the block layer merged them"
    elif ratio < 1:
        why = "most were served from the page cache (buffered I/O), or the data never reached the device"
    elif direction == "read" and bytes_ratio is not None and bytes_ratio > MISMATCH:
        why = "more data read than fio asked for: readahead"
    else:
        why = (
            "requests split by the device's size limits, writeback of earlier writes, or other processes' I/O"
        )
    return f"device {direction}s were {ratio:.2f}× fio's: {why}"


def _depth_notes(totals: pd.DataFrame, params: Sequence[str]) -> dict[tuple[int, int], str]:
    """Points where a deeper queue bought no I/Os but waited longer (the device's limit)."""
    if "iodepth" not in totals or "_dev_iops" not in totals:
        return {}
    others = [c for c in params if c != "iodepth" and c in totals]
    found: dict[tuple[int, int], str] = {}
    # A depth that is no number (a hand-edited point) is not compared.
    depth = pd.to_numeric(totals["iodepth"], errors="coerce")
    data = totals.assign(iodepth=depth).dropna(subset=["iodepth", "_dev_iops", "_dev_await"])
    keys = ["repeat", *others]
    groups: dict[tuple[Any, ...], list[dict[Any, Any]]] = {}
    for row in data[["point", "iodepth", "_dev_iops", "_dev_await", *keys]].to_dict("records"):
        groups.setdefault(tuple(None if pd.isna(row[k]) else row[k] for k in keys), []).append(row)
    for rows in groups.values():
        ordered = sorted(rows, key=lambda row: float(row["iodepth"]))
        for lower, upper in zip(ordered, ordered[1:], strict=False):
            if (
                float(upper["iodepth"]) < AWAIT_DEPTH_RATIO * float(lower["iodepth"])
                or lower["_dev_iops"] <= 0
            ):
                continue
            gain = float(upper["_dev_iops"]) / float(lower["_dev_iops"]) - 1
            if (
                gain < AWAIT_IOPS_GAIN
                and float(upper["_dev_await"]) >= AWAIT_RATIO * float(lower["_dev_await"]) > 0
            ):
                found[(int(upper["point"]), int(upper["repeat"]))] = (
                    f"from iodepth {lower['iodepth']:g} to {upper['iodepth']:g} the device's await rose from "
                    f"{lower['_dev_await']:.2f} to {upper['_dev_await']:.2f} ms while its IOPS grew {gain:.0%}"
                )
    return found


def summaries(
    run: RunDir,
    frame: pd.DataFrame,
    points: Points | None = None,
    unreadable: dict[tuple[int, int], str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The telemetry summary of every point × repeat (× host) of ``run`` (the one place it is computed).

    Parameters
    ----------
    run
        The run directory.
    frame
        Its tidy frame without the telemetry columns (fio's numbers, to compare with the device's).
    points
        Its saved points, already read (default: read them).
    unreadable
        Receives, per point × repeat, why its telemetry file cannot be read.

    Returns
    -------
    tuple of pandas.DataFrame
        Per point × repeat × site × direction: ``point``, ``repeat``,
        ``host`` (the site's; NA for this machine), ``direction`` and
        :data:`DIRECTION_COLUMNS`; per point × repeat × site: ``point``,
        ``repeat``, ``host`` and :data:`POINT_COLUMNS`. A host's devices are
        compared with that host's share of fio's numbers.
    """
    loaded = _load_points(run, points, {} if unreadable is None else unreadable)
    manifest = run.manifest()
    links: dict[str | None, dict[str, dict[str, Any]]] = {None: _links(manifest.machine.facts())}
    links.update({str(h.get("host")): _links(h) for h in manifest.hosts if isinstance(h, dict)})
    per_direction: list[dict[str, Any]] = []
    judges = []
    fio = _fio_numbers(frame, by_host=any(p.host is not None for p in loaded))
    for p in loaded:
        judge = _Judge(p, links.get(p.host, {}))
        judge.cpu()
        judge.threads()
        directions = judge.disks()
        judge.irqs()
        for direction, values in directions.items():
            mine = fio.get((p.point, p.repeat, p.host, direction))
            ratio = bytes_ratio = math.nan
            if mine is not None and mine[0] > 0:
                ratio = values["dev_iops"] / mine[0]
                bytes_ratio = values["dev_bw_bytes"] / mine[1] if mine[1] > 0 else math.nan
                note = _mismatch(direction, ratio, bytes_ratio if math.isfinite(bytes_ratio) else None)
                if note and p.context.get("ioengine") == "null":
                    note = "the null engine does no I/O: the device's counts are other processes'"
                if note:
                    judge.notes.append(note)
            if mine is None and values["dev_iops"] == 0:
                continue
            per_direction.append(
                {
                    "point": p.point,
                    "repeat": p.repeat,
                    "host": p.host,
                    "direction": direction,
                    **values,
                    "dev_fio_ratio": ratio,
                }
            )
        judges.append(judge)
    params = parameter_columns(frame) if "point" in frame else []
    depth = _depth_notes(_with_params(pd.DataFrame([j.row for j in judges]), frame, params), params)
    rows = []
    for judge in judges:
        if judge.p.context.get("status", "ok") == "ok":
            judge.verdict(depth.get((judge.p.point, judge.p.repeat)))
        judge.row["telemetry_note"] = "; ".join(dict.fromkeys(judge.notes)) or None
        rows.append({"host": judge.p.host, **{k: v for k, v in judge.row.items() if not k.startswith("_")}})
    return (
        pd.DataFrame(per_direction, columns=["point", "repeat", "host", "direction", *DIRECTION_COLUMNS]),
        pd.DataFrame(rows, columns=["point", "repeat", "host", *POINT_COLUMNS]),
    )


def _fio_numbers(
    frame: pd.DataFrame, *, by_host: bool = False
) -> dict[tuple[int, int, str | None, str], tuple[float, float]]:
    """fio's IOPS and bytes/s per point × repeat × host (None: this machine) × direction, from :func:`rate_totals`."""
    if frame.empty or "point" not in frame or "iops" not in frame:
        return {}
    split = by_host and "host" in frame
    totals = rate_totals(frame, by=["host"] if split else ())
    if totals.empty:
        return {}
    out = {}
    bw = totals["bw_bytes"] if "bw_bytes" in totals else pd.Series(np.nan, index=totals.index)
    hosts = totals["host"] if split else pd.Series([None] * len(totals), index=totals.index)
    for point, repeat, host, direction, iops, rate in zip(
        totals["point"], totals["repeat"], hosts, totals["direction"], totals["iops"], bw, strict=True
    ):
        if pd.isna(iops):
            continue
        key = (int(point), int(repeat), None if host is None or pd.isna(host) else str(host), str(direction))
        out[key] = (float(iops), 0.0 if pd.isna(rate) else float(rate))
    return out


def _with_params(rows: pd.DataFrame, frame: pd.DataFrame, params: Sequence[str]) -> pd.DataFrame:
    if rows.empty or "point" not in frame:
        return rows
    first = frame[["point", *params]].drop_duplicates("point")
    return rows.merge(first, on="point", how="left")


def with_telemetry(
    frame: pd.DataFrame, run: RunDir, *, points: Points | None = None, notes: list[str] | None = None
) -> pd.DataFrame:
    """The tidy frame with the telemetry summary columns (:data:`SUMMARY_COLUMNS`), NA where none was recorded.

    ``dev_iops``, ``dev_bw_bytes``, ``dev_await_ms`` and ``dev_fio_ratio`` are
    the row's direction's; the others are the point × repeat's (on hosts: its
    host's), the same on every row of it. An ok point that was sampled always
    has a ``bottleneck``; one that was not has ``bottleneck_reason`` saying what
    is known of why. A telemetry file that cannot be read leaves its point's
    columns NA, its ``telemetry_note`` naming the file and why, and is appended
    to ``notes``. ``points``: the run's saved points, already read.
    """
    if "point" not in frame or "repeat" not in frame:
        return frame
    unreadable: dict[tuple[int, int], str] = {}
    per_direction, per_point = summaries(run, frame, points, unreadable)
    if notes is not None:
        notes += list(unreadable.values())
    by_direction: dict[tuple[Any, ...], Any] = {
        (int(r["point"]), int(r["repeat"]), _host(r["host"]), str(r["direction"])): r
        for r in per_direction.to_dict("records")
    }
    by_point: dict[tuple[Any, ...], Any] = {
        (int(r["point"]), int(r["repeat"]), _host(r["host"])): r for r in per_point.to_dict("records")
    }
    sampled_hosts = any(key[2] is not None for key in by_point)
    numbers = [None if pd.isna(v) else int(v) for v in frame["point"]]
    repeats = [None if pd.isna(v) else int(v) for v in frame["repeat"]]
    hosts = [_host(v) for v in frame["host"]] if sampled_hosts and "host" in frame else [None] * len(frame)
    directions = (
        [None if pd.isna(v) else str(v) for v in frame["direction"]]
        if "direction" in frame
        else [None] * len(frame)
    )
    status = frame["status"].tolist() if "status" in frame else ["ok"] * len(frame)
    missing = _why_unsampled(run)
    columns: dict[str, list[Any]] = {c: [] for c in SUMMARY_COLUMNS}
    for point, repeat, host, direction, state in zip(
        numbers, repeats, hosts, directions, status, strict=True
    ):
        whole = by_point.get((point, repeat, host)) if point is not None and repeat is not None else None
        part = by_direction.get((point, repeat, host, direction)) if whole is not None and direction else None
        for column in SUMMARY_COLUMNS:
            source = part if column in DIRECTION_COLUMNS else whole
            value = None if source is None else source.get(column)
            columns[column].append(
                None if value is None or (isinstance(value, float) and math.isnan(value)) else value
            )
        problem = unreadable.get((point, repeat)) if point is not None and repeat is not None else None
        if problem is not None:
            columns["telemetry_note"][-1] = problem
        elif whole is None and state == "ok":
            columns["bottleneck_reason"][-1] = missing
    out = frame.copy()
    for column, values in columns.items():
        out[column] = pd.array(values, dtype="string" if column in TELEMETRY_TEXT else "Float64")
    return out


def _host(value: Any) -> str | None:
    return None if value is None or (not isinstance(value, str) and pd.isna(value)) else str(value)


def _why_unsampled(run: RunDir) -> str:
    """What the run's files say of why an ok point has no samples (never a guess)."""
    from iobench.matrix.yamlsource import YamlSyntaxError, load_yaml

    try:
        matrix, _ = load_yaml(read_text(run.path / "matrix.yaml", MATRIX, run.path))
    except (OSError, YamlSyntaxError):
        matrix = None
    if isinstance(matrix, dict) and matrix.get("telemetry") is False:
        return "no telemetry recorded: the matrix says `telemetry: false`"
    return "no telemetry recorded: the point's folder has no samples file"


def cpu_by_node(samples: pd.DataFrame) -> pd.DataFrame:
    """Where each point's CPU time went, per NUMA node: user, system, irq, softirq and iowait in CPUs.

    Parameters
    ----------
    samples
        :func:`telemetry` of a run.

    Returns
    -------
    pandas.DataFrame
        ``point``, ``repeat``, ``node`` and one column per kind: the node's
        CPUs' mean share of the window summed over them (2.0 = two CPUs' worth).
    """
    kinds = ["user_pct", "system_pct", "irq_pct", "softirq_pct", "iowait_pct"]
    cpu = samples[(samples["source"] == "cpu") & samples["metric"].isin(kinds)]
    if cpu.empty:
        return pd.DataFrame(columns=["point", "repeat", "node", *[k.removesuffix("_pct") for k in kinds]])
    per_cpu = cpu.groupby(["point", "repeat", "node", "entity", "metric"], dropna=False)["value"].mean()
    per_node = (per_cpu / 100.0).groupby(level=["point", "repeat", "node", "metric"], dropna=False).sum()
    table = per_node.unstack("metric").reindex(columns=kinds).fillna(0.0).reset_index()
    return table.rename(columns={k: k.removesuffix("_pct") for k in kinds})


def thread_shares(samples: pd.DataFrame, top: int = 8) -> pd.DataFrame:
    """Each point's busiest threads: mean CPU share (% of one CPU) of the ``top`` busiest names over all points.

    Returns
    -------
    pandas.DataFrame
        ``point``, ``repeat``, ``thread``, ``cpu_pct``.
    """
    rows = samples[(samples["source"] == "thread") & (samples["metric"] == "cpu_pct")]
    if rows.empty:
        return pd.DataFrame(columns=["point", "repeat", "thread", "cpu_pct"])
    counts = samples.groupby(["point", "repeat"])["t_s"].nunique().rename("n")
    sums = rows.groupby(["point", "repeat", "entity"])["value"].sum().reset_index()
    sums = sums.merge(counts.reset_index(), on=["point", "repeat"])
    sums["cpu_pct"] = sums["value"] / sums["n"]
    names = sums.groupby("entity")["cpu_pct"].max().sort_values(ascending=False).index[:top]
    keep = sums[sums["entity"].isin(names)].rename(columns={"entity": "thread"})
    return keep[["point", "repeat", "thread", "cpu_pct"]].reset_index(drop=True)
