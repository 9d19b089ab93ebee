"""Telemetry around one point: what to watch, the sampler while fio runs, the samples saved with the point.

:func:`start` decides what the point's sampler reads (its targets' devices and
the disks under them, those disks' interrupt lines, the point's CPUs to stay
off) and starts it; :meth:`PointTelemetry.stop` ends it the moment fio has
ended; :meth:`PointTelemetry.save` finds the measured window from fio's output
and writes ``telemetry.parquet`` into the point's staging folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iobench.matrix.values import Duration
from iobench.planner.plans import Plan, PlannedRun, SiteFacts
from iobench.runner.sites import HostSite, Site
from iobench.store.records import PointMeta
from iobench.system import blockdevs, procfs
from iobench.system.hostfs import SystemRoot
from iobench.system.hostmonitor import HostMonitor
from iobench.system.pointfacts import NOT_LAID_OUT, collect, target_facts
from iobench.system.sampler import Sampler, Snapshot, Watch

if TYPE_CHECKING:
    from iobench.results.fioout.rows import Row

_TIMESTAMP = re.compile(rb'"timestamp_ms"\s*:\s*(\d+)')
#: Bytes of fio's JSON output read to find its ``timestamp_ms`` (it comes before the jobs).
HEAD_BYTES = 4096


def _watch_devices(
    plan: SiteFacts, targets: Sequence[str], system: SystemRoot, notes: list[str]
) -> dict[str, dict[str, Any]]:
    """Every device whose counters matter to the point's ``targets`` there, with its role, target and home node."""
    devices: dict[str, dict[str, Any]] = {}

    def add(name: str, role: str, target: str, home: int | None) -> None:
        devices.setdefault(name, {"role": role, "target": target, "home_node": home})

    for path in targets:
        location = plan.locations[path]
        if location.device is None:
            notes.append(f"{path}: no block device under it (tmpfs?): no device counters")
            continue
        add(location.device, "target", path, location.home_node)
        for below in blockdevs.devices_below(system, location.device)[1:]:
            add(below, "member", path, _home(plan, below))
        for disk in location.disks:
            add(disk, "disk", path, _home(plan, disk))
        backing = blockdevs.loop_backing_device(system, location.device)
        if backing is not None:
            add(backing, "backing", path, _home(plan, backing))
    return devices


def _home(plan: SiteFacts, name: str) -> int | None:
    device = plan.topology.device(name)
    return device.numa_node if device is not None else None


def _watch_irqs(
    devices: dict[str, dict[str, Any]], system: SystemRoot, notes: list[str]
) -> dict[str, dict[str, Any]]:
    """The interrupt lines of the targets' disks (not of a loop device's backing disk)."""
    irqs: dict[str, dict[str, Any]] = {}
    disks = [
        n
        for n, f in devices.items()
        if f["role"] in ("target", "disk") and not blockdevs.is_partition(system, n)
    ]
    table = procfs.interrupts(system) if disks else None
    if disks and table is None:
        notes.append("/proc/interrupts cannot be read: no interrupt data (irq_remote_pct is NA)")
        return irqs
    for disk in disks:
        lines = blockdevs.device_irqs(system, disk)
        if not lines:
            directory = system.block_dir(disk)
            if directory is not None and not system.exists(directory / "device"):
                notes.append(f"{disk} is a virtual device: no interrupts of its own")
            else:
                notes.append(
                    f"{disk}: no interrupt lines in sysfs (no msi_irqs nor irq): irq_remote_pct is NA"
                )
            continue
        for irq in lines:
            name = table.names.get(str(irq), "") if table is not None else ""
            irqs[str(irq)] = {"device": disk, "name": name}
    return irqs


@dataclass
class HostSamples:
    """A host's samples of one point: at its edge before fio, the run-long monitor's while jobs ran, after fio.

    Stands where this machine's :class:`~iobench.system.sampler.Sampler` does.
    """

    monitor: HostMonitor | None
    first: Snapshot | None
    start: float = field(default_factory=time.monotonic)
    last: Snapshot | None = None
    placed_on: tuple[int, ...] | None = None
    cpu_s: float = 0.0
    read_s: float = 0.0

    @property
    def snapshots(self) -> list[Snapshot]:
        """In time order."""
        end = self.last.t if self.last is not None else float("inf")
        middle = [s for s in self.monitor.samples_since(self.start) if s.t < end] if self.monitor else []
        edges = [s for s in (self.first, *middle, self.last) if s is not None]
        return sorted(edges, key=lambda s: s.t)

    def stop(self) -> list[Snapshot]:
        """Every sample so far."""
        return self.snapshots


@dataclass
class PointTelemetry:
    """The sampler of one running point on one site and what it needs to save its samples."""

    run: PlannedRun
    sampler: Sampler | HostSamples
    context: dict[str, Any]
    offset: float = field(default_factory=lambda: time.time() - time.monotonic())
    ended: float | None = None

    def stop(self) -> None:
        """End sampling (fio has ended): the last sample is taken now."""
        if self.ended is None:
            self.ended = time.monotonic()
            self.sampler.stop()

    def window(self, outputs: Sequence[Path], rows: Sequence[Sequence[Row]]) -> tuple[float, float, str]:
        """The measured window (monotonic seconds) and how it was found.

        Its end is when fio wrote its results (``timestamp_ms``, the latest of
        the point's fio processes), else when fio ended; its start is the
        longest job's ``runtime_ms`` before that, else the first sample.
        """
        snaps = self.sampler.snapshots
        first, last = snaps[0].t, snaps[-1].t
        stamps = [s for s in (_timestamp(p) for p in outputs) if s is not None]
        end = min(max(stamps) / 1000.0 - self.offset, last) if stamps else last
        from iobench.results.fioout.rows import FRAME_COLUMNS

        at = FRAME_COLUMNS.index("runtime_ms")
        runtimes = [float(r[at]) for part in rows for r in part if r[at] is not None and float(r[at]) > 0]
        if runtimes:
            start = max(first, end - max(runtimes) / 1000.0)
            return start, max(start, end), "fio" if stamps else "fio runtime before fio's exit"
        return first, last, "sampled span (no fio runtime)"

    def save(
        self,
        cwd: Path,
        outputs: Sequence[Path],
        rows: Sequence[Sequence[Row]],
        status: str,
        last: Snapshot | None = None,
    ) -> None:
        """Write ``telemetry.parquet`` (samples within the measured window, with the context) into ``cwd``.

        Raises
        ------
        RunStorageError
            When the file cannot be written.
        """
        from iobench.results.samples import build_table, file_name, write_table  # pyarrow: after fio

        self.stop()
        if last is not None and isinstance(self.sampler, HostSamples):
            self.sampler.last = last  # the host's sample at the point's edge after fio
        snaps = self.sampler.stop()
        context = self.context
        context.update(
            status=status,
            samples=len(snaps),
            sampler_cpus=list(self.sampler.placed_on) if self.sampler.placed_on is not None else None,
            sampler_cpu_s=round(self.sampler.cpu_s, 4),
            sampler_read_s=round(self.sampler.read_s, 4),
        )
        if len(snaps) < 2:
            context["notes"].append("fio ended before a second sample: no telemetry for this point")
            start = end = snaps[0].t if snaps else 0.0
            how = "none"
        else:
            start, end, how = self.window(outputs, rows)
        context["window"] = how
        table = build_table(
            snaps, point=self.run.point, repeat=self.run.repeat, window=(start, end), context=context
        )
        write_table(cwd / file_name(context.get("host")), table, context)


def _timestamp(path: Path) -> int | None:
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return None
    found = _TIMESTAMP.search(head)
    return int(found[1]) if found else None


Watched = dict[tuple[str, ...], tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], list[str]]]
"""A run's targets (a point's, sorted) → their devices, those disks' interrupt lines, and the notes on them."""


def _watched(
    plan: SiteFacts, targets: tuple[str, ...], system: SystemRoot, known: Watched | None
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], list[str]]:
    """The devices and interrupt lines ``run`` watches, found in sysfs once per set of targets in a run.

    They cannot change while the run lasts: a target replaced or removed fails the point first.
    """
    known = {} if known is None else known
    key = targets
    if key not in known:
        notes: list[str] = []
        devices = _watch_devices(plan, targets, system, notes)
        known[key] = (devices, _watch_irqs(devices, system, notes), notes)
    devices, irqs, notes = known[key]
    return {n: dict(f) for n, f in devices.items()}, {i: dict(f) for i, f in irqs.items()}, list(notes)


def start(
    plan: Plan, run: PlannedRun, site: Site, known: Watched | None = None, first: Snapshot | None = None
) -> PointTelemetry | None:
    """Start sampling ``site`` for ``run`` (call just before fio starts); None when telemetry is off or cannot apply.

    A plan made from a snapshot (``fsroot`` other than ``/``) or a point that
    does not run is not sampled. ``known`` (one per run and site) keeps what
    sysfs said about the targets' devices for the next points.
    """
    interval = plan.matrix.telemetry_s
    facts = site.facts
    if (
        interval is None
        or run.status != "run"
        or (site.host is None and os.path.realpath(facts.fsroot) != "/")
    ):
        return None
    system = site.system
    processes = [p for p in run.processes if p.host == site.host]
    targets = tuple(sorted({t for p in run.processes if p.host == site.host for t in p.targets}))
    devices, irqs, notes = _watched(facts, targets, system, known)
    cpus = sorted({c for p in processes for c in p.cpus})
    ramp = plan.matrix.setting(run.params, "ramp_time")
    delay = float(ramp) if isinstance(ramp, Duration) else 0.0
    watch = Watch(devices=tuple(devices), irqs=tuple(irqs), avoid_cpus=tuple(cpus))
    engine = plan.matrix.setting(run.params, "ioengine")
    context: dict[str, Any] = {
        **({"host": site.host} if site.host is not None else {}),
        "interval_s": interval,
        "ioengine": None if engine is None else str(engine),
        "ramp_s": delay,
        "point_cpus": cpus,
        "cpu_nodes": {str(c): n.id for n in facts.topology.nodes for c in n.cpus},
        "devices": devices,
        "irqs": irqs,
        "notes": notes,
        "threads": watch.threads,
        "runner_pid": os.getpid(),  # its threads (watchers, preloads) are iobench's, not competition
    }
    if isinstance(site, HostSite):
        return PointTelemetry(run, HostSamples(site.monitor, first), context)
    sampler = Sampler(watch, interval, delay=delay, system=system)
    telemetry = PointTelemetry(run, sampler, context)
    sampler.start()
    return telemetry


def host_watch(plan: Plan, site: Site, known: Watched) -> Watch:
    """What a host's monitor samples for the whole run: the devices and interrupt lines of all its targets."""
    targets = tuple(sorted(site.facts.locations))
    devices, irqs, _ = _watched(site.facts, targets, site.system, known)
    return Watch(devices=tuple(devices), irqs=tuple(irqs))


@contextlib.contextmanager
def point_facts(plan: Plan, run: PlannedRun, meta: PointMeta, site: Site) -> Iterator[None]:
    """Read the point's validity facts on this machine before the block (fio's run) and after it, into ``meta.facts``.

    The checks of :mod:`iobench.results.validity` read them from the saved
    point. A point that does not run, a plan made from a snapshot, or a point
    on hosts gets none (their checks are NA, saying so); a target file fio lays
    out during the point is looked at once fio is done.
    """
    if run.status != "run" or site.host is not None or os.path.realpath(site.facts.fsroot) != "/":
        yield
        return
    system = site.system
    locations = [site.facts.locations[path] for path in sorted({t for p in run.processes for t in p.targets})]
    regions = _regions(plan, run)
    cpus = sorted({c for p in run.processes for c in p.cpus})
    before = collect(system, locations, cpus, phase="before", regions=regions)
    try:
        yield
    finally:
        after = collect(system, locations, cpus, phase="after")
        laid_out = {
            location.path: target_facts(system, location, regions.get(location.path, (0, None)))
            for location in locations
            if (before.get("targets") or {}).get(location.path, {}).get("note") == NOT_LAID_OUT
        }
        if laid_out:
            after["targets"] = laid_out
        meta.facts = {"before": before, "after": after}


def _regions(plan: Plan, run: PlannedRun) -> dict[str, tuple[int, int | None]]:
    """Per target, fio's ``offset`` and ``size`` for it: the target's own size, else the point's ``size``."""
    size, offset = plan.matrix.setting(run.params, "size"), plan.matrix.setting(run.params, "offset")
    start = offset if isinstance(offset, int) and not isinstance(offset, bool) else 0
    common = size if isinstance(size, int) and not isinstance(size, bool) else None
    return {t.path: (start, t.size if t.size is not None else common) for t in plan.matrix.targets}
