"""A point's telemetry samples into their long form, saved and read back (no pandas: the run loop uses it).

:func:`build_table` turns the sampler's raw counters
(:mod:`iobench.system.sampler`) into one row per sample interval × entity ×
metric, :func:`write_table` saves it as ``points/<key>/telemetry.parquet`` with
the point's context in the file's metadata, and :func:`read_point` reads one
back. The summaries and the verdict are :mod:`iobench.results.telemetry`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from iobench.errors import ResultsError
from iobench.store.rundir import storage
from iobench.store.untrusted import UnreadableRunFile, parse_json, read_table, run_of
from iobench.system.hostfs import CPU_TIME_FIELDS
from iobench.system.sampler import MEMINFO_KEPT, Snapshot

FILE_NAME = "telemetry.parquet"
"""This machine's samples of a point; a host's are ``telemetry@<host>.parquet`` (:func:`file_name`)."""


def file_name(host: str | None) -> str:
    """The file of a site's samples in a point's folder: ``telemetry.parquet``, ``telemetry@<host>.parquet``."""
    return FILE_NAME if host is None else f"telemetry@{host}.parquet"


def point_files(point_dir: Path) -> list[tuple[str | None, Path]]:
    """Every site's samples file in a point's folder, with the site's host (None: this machine)."""
    found: list[tuple[str | None, Path]] = []
    try:
        names = os.listdir(point_dir)  # one listing: a glob per point is the slow part of a large rebuild
    except OSError:
        return found
    if FILE_NAME in names:  # whatever it is: the reader says why it is not read (a FIFO, a link...)
        found.append((None, point_dir / FILE_NAME))
    for name in sorted(n for n in names if n.startswith("telemetry@") and n.endswith(".parquet")):
        found.append((name.removeprefix("telemetry@").removesuffix(".parquet"), point_dir / name))
    return found


#: The long form's columns (docs/telemetry.md).
COLUMNS: tuple[str, ...] = ("point", "repeat", "t_s", "source", "entity", "node", "metric", "value")
"""The columns of a samples file."""
_META_KEY = b"iobench_telemetry"
_SECTOR = 512
_CLK_TCK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


# --- samples → long form ---------------------------------------------------------------


class _Rows:
    def __init__(self) -> None:
        self.t_s: list[float] = []
        self.source: list[str] = []
        self.entity: list[str] = []
        self.node: list[int | None] = []
        self.metric: list[str] = []
        self.value: list[float] = []

    def add(self, t_s: float, source: str, entity: str, node: int | None, metric: str, value: float) -> None:
        self.t_s.append(t_s)
        self.source.append(source)
        self.entity.append(entity)
        self.node.append(node)
        self.metric.append(metric)
        self.value.append(float(value))


def _cpu_rows(
    rows: _Rows, t_s: float, before: Snapshot, after: Snapshot, cpu_nodes: Mapping[int, int]
) -> None:
    if before.cpu is None or after.cpu is None:
        return
    index = {name: i for i, name in enumerate(CPU_TIME_FIELDS)}
    counted = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")  # guest is in user
    for cpu, now in after.cpu.items():
        then = before.cpu.get(cpu)
        if then is None:
            continue
        delta = {name: max(0, now[index[name]] - then[index[name]]) for name in counted}
        total = sum(delta.values())
        if total <= 0:
            continue
        node = cpu_nodes.get(cpu)
        pct = {name: 100.0 * value / total for name, value in delta.items()}
        for metric, value in (
            ("user_pct", pct["user"] + pct["nice"]),
            ("system_pct", pct["system"]),
            ("irq_pct", pct["irq"]),
            ("softirq_pct", pct["softirq"]),
            ("iowait_pct", pct["iowait"]),
            ("steal_pct", pct["steal"]),
            ("idle_pct", pct["idle"]),
            ("busy_pct", 100.0 - pct["idle"] - pct["iowait"]),
        ):
            rows.add(t_s, "cpu", str(cpu), node, metric, value)


def thread_name(comm: str, pid: int, kind: str) -> str:
    """A thread's ``entity`` in the long form: its name, and for a process's own threads its pid.

    fio's threads and the kernel's are summed by name (``fio``, ``kworker/0:1H``):
    what they cost is the point's. Any other process's are named with its pid,
    and iobench's own say so (``python3 [iobench, pid 400]``), so that a busy
    process is never confused with iobench itself or another of the same name.
    """
    if kind in ("fio", "kernel"):
        return comm
    return f"{comm} [iobench, pid {pid}]" if kind == "iobench" else f"{comm} [pid {pid}]"


def _thread_rows(
    rows: _Rows,
    t_s: float,
    seconds: float,
    before: Snapshot,
    after: Snapshot,
    cpu_nodes: Mapping[int, int],
    kinds: dict[str, str],
    runner: int | None = None,
) -> None:
    """One row set per thread name: CPU share summed over its threads (% of one CPU), and the busiest one's.

    Per CPU, also the share other processes took of it (``cpu``/``other_pct``):
    threads that are neither fio's, the kernel's nor the runner's own
    (``runner_pid``), counted on the CPU each last ran on in the interval.
    """
    if before.tasks is None or after.tasks is None:
        return
    leaders = {t.pid: t.comm for t in after.tasks.values() if t.tid == t.pid}
    others: dict[int, float] = dict.fromkeys(after.cpu or {}, 0.0)
    named: dict[str, list[float]] = {}
    where: dict[str, tuple[float, int | None]] = {}
    for tid, now in after.tasks.items():
        then = before.tasks.get(tid)
        if then is None or then.pid != now.pid:
            continue
        user = max(0, now.user_ticks - then.user_ticks) / _CLK_TCK
        system = max(0, now.system_ticks - then.system_ticks) / _CLK_TCK
        if user + system <= 0:
            continue
        share = 100.0 * (user + system) / seconds
        leader = leaders.get(now.pid, "")
        kind = (
            "kernel"
            if now.kernel
            else "fio"
            if leader.startswith("fio")
            else "iobench"
            if now.pid == runner or (runner is None and now.comm.startswith("iobench-"))
            else "other"
        )
        name = thread_name(now.comm, now.pid, kind)
        totals = named.setdefault(name, [0.0, 0.0, 0.0, 0.0, 0.0])
        totals[0] += share
        totals[1] += 100.0 * user / seconds
        totals[2] += 100.0 * system / seconds
        totals[3] += 1
        totals[4] = max(totals[4], share)
        if share >= where.get(name, (-1.0, None))[0]:
            where[name] = (share, None if now.processor is None else cpu_nodes.get(now.processor))
        kinds.setdefault(name, kind)
        if kind == "other" and now.processor is not None:
            others[now.processor] = others.get(now.processor, 0.0) + share
    for comm, (cpu, user, system, threads, busiest) in named.items():
        node = where[comm][1]
        for metric, value in (
            ("cpu_pct", cpu),
            ("user_pct", user),
            ("system_pct", system),
            ("threads", threads),
            ("max_thread_pct", busiest),
        ):
            rows.add(t_s, "thread", comm, node, metric, value)
    for cpu, share in sorted(others.items()):
        rows.add(t_s, "cpu", str(cpu), cpu_nodes.get(cpu), "other_pct", min(100.0, share))


def _disk_rows(
    rows: _Rows, t_s: float, seconds: float, before: Snapshot, after: Snapshot, homes: Mapping[str, Any]
) -> None:
    if before.disks is None or after.disks is None:
        return
    for name, now in after.disks.items():
        then = before.disks.get(name)
        if then is None:
            continue
        node = homes.get(name)
        ms = seconds * 1000.0
        for prefix, ios, merges, sectors, busy in (
            ("read", "reads", "reads_merged", "sectors_read", "read_ms"),
            ("write", "writes", "writes_merged", "sectors_written", "write_ms"),
            ("discard", "discards", "discards_merged", "sectors_discarded", "discard_ms"),
        ):
            count = max(0, getattr(now, ios) - getattr(then, ios))
            if prefix == "discard" and count == 0:
                continue
            rows.add(t_s, "disk", name, node, f"{prefix}_iops", count / seconds)
            rows.add(
                t_s,
                "disk",
                name,
                node,
                f"{prefix}_bytes_s",
                max(0, getattr(now, sectors) - getattr(then, sectors)) * _SECTOR / seconds,
            )
            rows.add(
                t_s,
                "disk",
                name,
                node,
                f"{prefix}_merges_s",
                max(0, getattr(now, merges) - getattr(then, merges)) / seconds,
            )
            if count:
                rows.add(
                    t_s,
                    "disk",
                    name,
                    node,
                    f"{prefix}_await_ms",
                    max(0, getattr(now, busy) - getattr(then, busy)) / count,
                )
        rows.add(t_s, "disk", name, node, "util_pct", min(100.0, 100.0 * max(0, now.io_ms - then.io_ms) / ms))
        rows.add(t_s, "disk", name, node, "queue_depth", max(0, now.queue_ms - then.queue_ms) / ms)
        rows.add(t_s, "disk", name, node, "in_flight", float(now.in_flight))


def irq_entity(irq: str, description: str) -> str:
    """How an interrupt line is named in the long form: its number and handler (``36 virtio1-req.0``)."""
    words = description.split()
    return f"{irq} {words[-1]}" if words else irq


def _irq_rows(
    rows: _Rows, t_s: float, seconds: float, before: Snapshot, after: Snapshot, cpu_nodes: Mapping[int, int]
) -> None:
    if before.irqs is None or after.irqs is None:
        return
    for irq, counts in after.irqs.counts.items():
        then = before.irqs.counts.get(irq)
        if then is None:
            continue
        entity = irq_entity(irq, after.irqs.names.get(irq, ""))
        for cpu, now_count, then_count in zip(after.irqs.cpus, counts, then, strict=False):
            served = now_count - then_count
            if served > 0:
                rows.add(t_s, "irq", entity, cpu_nodes.get(cpu), f"cpu{cpu}_per_s", served / seconds)


def _mem_rows(rows: _Rows, t_s: float, after: Snapshot, first: Snapshot) -> None:
    if after.mem is None:
        return
    for key in MEMINFO_KEPT:
        if key in after.mem:
            rows.add(t_s, "mem", "system", None, f"{key.lower()}_bytes", after.mem[key])
    if first.mem is not None and "Cached" in after.mem and "Cached" in first.mem:
        rows.add(t_s, "mem", "system", None, "cache_growth_bytes", after.mem["Cached"] - first.mem["Cached"])


def build_table(
    snapshots: Sequence[Snapshot],
    *,
    point: int,
    repeat: int,
    window: tuple[float, float],
    context: dict[str, Any],
) -> Any:
    """Turn a point's snapshots into its long form (a pyarrow Table), and complete ``context``.

    Parameters
    ----------
    snapshots
        In time order, from :class:`iobench.system.sampler.Sampler`.
    point, repeat
        The point × repeat they belong to.
    window
        The measured window, in ``time.monotonic()`` seconds; intervals outside it are dropped.
    context
        The point's context (``cpu_nodes``, ``devices``…); ``intervals``
        (``[t_s, seconds inside the window, interval length]`` each),
        ``thread_kinds`` (thread name → ``fio``, ``kernel``, ``iobench`` — the
        process ``runner_pid``, when the context names it — or ``other``) and
        ``window_s`` are added.

    Returns
    -------
    pyarrow.Table
        The :data:`COLUMNS`.
    """
    import pyarrow as pa

    rows = _Rows()
    start, end = window
    cpu_nodes = {int(cpu): int(node) for cpu, node in (context.get("cpu_nodes") or {}).items()}
    homes = {name: facts.get("home_node") for name, facts in (context.get("devices") or {}).items()}
    kinds: dict[str, str] = dict(context.get("thread_kinds") or {})
    intervals = []
    for before, after in zip(snapshots, snapshots[1:], strict=False):
        seconds = after.t - before.t
        inside = min(after.t, end) - max(before.t, start)
        if seconds <= 0 or inside <= 1e-6:
            continue
        t_s = round(min(after.t, end) - start, 6)
        intervals.append([t_s, round(inside, 6), round(seconds, 6)])
        _cpu_rows(rows, t_s, before, after, cpu_nodes)
        _thread_rows(rows, t_s, seconds, before, after, cpu_nodes, kinds, context.get("runner_pid"))
        _disk_rows(rows, t_s, seconds, before, after, homes)
        _irq_rows(rows, t_s, seconds, before, after, cpu_nodes)
        _mem_rows(rows, t_s, after, snapshots[0])
    context.update(intervals=intervals, thread_kinds=kinds, window_s=round(max(0.0, end - start), 6))
    count = len(rows.t_s)
    return pa.table(
        {
            "point": pa.array([point] * count, pa.int32()),
            "repeat": pa.array([repeat] * count, pa.int32()),
            "t_s": pa.array(rows.t_s, pa.float64()),
            "source": pa.array(rows.source, pa.string()),
            "entity": pa.array(rows.entity, pa.string()),
            "node": pa.array(rows.node, pa.int32()),
            "metric": pa.array(rows.metric, pa.string()),
            "value": pa.array(rows.value, pa.float64()),
        }
    )


def write_table(path: Path, table: Any, context: Mapping[str, Any]) -> None:
    """Save a point's long form with its context (in the Parquet file's metadata).

    The file is written into the point's staging folder, which the runner moves
    into place as a whole: no temporary name is needed.

    Raises
    ------
    RunStorageError
        When it cannot be written.
    """
    import pyarrow.parquet as pq

    metadata = dict(table.schema.metadata or {})
    metadata[_META_KEY] = json.dumps(context, default=str).encode()
    with storage(path):
        pq.write_table(table.replace_schema_metadata(metadata), path)


def read_point(path: Path) -> tuple[Any, dict[str, Any]]:
    """A point's long form (pyarrow Table) and context, from its ``telemetry.parquet``.

    Raises
    ------
    ResultsError
        When the file cannot be read.
    """
    import pyarrow as pa

    try:
        # One file, read whole, its rows counted from its footer first (a point's files are input).
        table = read_table(path, run_of(path.parent))
    except UnreadableRunFile as exc:
        raise ResultsError(f"{path}: cannot read the telemetry: {exc.strerror}") from None
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise ResultsError(f"{path}: cannot read the telemetry: {exc}") from None
    raw = (table.schema.metadata or {}).get(_META_KEY, b"{}")
    try:
        context = parse_json(path, raw)
    except (ValueError, OSError):  # a context iobench did not write: the samples without it
        context = {}
    return table, context if isinstance(context, dict) else {}
