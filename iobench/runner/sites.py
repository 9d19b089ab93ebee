"""Where a point's fio runs: this machine, or a host through its agent and fio server — one interface for both.

The runner (:mod:`iobench.runner.point`) asks a :class:`Site` for everything a
point needs of a machine and never asks which kind it has: lock its disks,
journal, apply and restore device settings, tell whether its targets are
still the ones the run started with, read settings back, drop its page
cache, sample its counters while fio runs, and remember the files fio
created. This machine is a fleet of one (:class:`LocalSite`); a host of the
matrix is a :class:`HostSite` over its SSH connection (:mod:`iobench.system.fleet`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from iobench.errors import IobenchError, SafetyError, TuningError
from iobench.planner.plans import SiteFacts
from iobench.system.created import create_target_file
from iobench.system.fleet import Host
from iobench.system.hostagent import AgentRefused
from iobench.system.hostfs import SystemRoot, devno_text
from iobench.system.hostmonitor import HostMonitor
from iobench.system.locks import LockWait, device_lock
from iobench.system.remote import RemoteRoot
from iobench.system.remoteguard import RemoteMachine
from iobench.system.safety import LOCAL, Machine, remember_created
from iobench.system.sampler import Snapshot, Watch
from iobench.system.ssh import HostUnreachable
from iobench.system.topology import parse_scheduler
from iobench.system.tuning import DeviceTuner, Settings, drop_caches, read_settings

LOCK_TIMEOUT_S = 30.0
"""Seconds a host may take to lock its disks."""


@dataclass(frozen=True)
class TargetState:
    """A target path as its machine shows it now, for telling whether it is still the one the run began with.

    Attributes
    ----------
    exists : bool
        Whether the path exists.
    block : bool
        Whether it is a block device.
    identity : tuple of int
        What stays the same while it is the same target: the device number of a
        block device, the file system and inode of a file.
    sectors : int or None
        A block device's size in sectors (0: the kernel no longer has it; None: unknown).
    error : str or None
        Why it could not be looked at (permission denied, ...).
    """

    exists: bool
    block: bool = False
    identity: tuple[int, ...] = ()
    sectors: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class PointEdge:
    """What a site showed just before (or after) a point's fio: its targets, its disks' settings, a sample.

    Attributes
    ----------
    states : dict of str to TargetState
        Each of the point's targets there.
    settings : dict of str to dict
        Each disk's scheduler and readahead in effect (disks that could not be read are left out).
    sample : Snapshot or None
        The site's counters at that moment, when the site takes them here (a host).
    """

    states: dict[str, TargetState]
    settings: dict[str, Settings]
    sample: Snapshot | None = None


class Site(Protocol):
    """What the runner needs of a machine a point runs on."""

    @property
    def facts(self) -> SiteFacts:
        """Its topology and targets, as planned."""

    @property
    def host(self) -> str | None:
        """The frame's ``host``; None for this machine."""

    @property
    def label(self) -> str:
        """Put before what is said about it (empty for this machine)."""

    @property
    def journal_host(self) -> dict[str, Any] | None:
        """How journals and the created-files registry name it (None: this machine)."""

    def alive(self) -> bool:
        """Whether it can still run points (a host whose connection dropped cannot)."""

    def down_reason(self) -> str:
        """Why it cannot (empty while it can)."""

    def lock(
        self, disks: Sequence[str], wait: LockWait | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """Hold each disk's iobench lock there for the block; a held one is refused (after ``wait``)."""

    def tuner(self, run_dir: str) -> DeviceTuner:
        """A tuner of its disks, journalling there or here for ``iobench restore``."""

    def states(self, paths: Sequence[str]) -> dict[str, TargetState]:
        """Each target path as it is now."""

    def edge(self, paths: Sequence[str], disks: Sequence[str], watch: Watch | None) -> PointEdge:
        """The targets' states, the disks' settings and (``watch``) the counters, at once: one round trip."""

    def drop_caches(self) -> None:
        """Sync and drop its page cache."""

    def make_files(self, paths: Sequence[str]) -> None:
        """Make each new file target there, empty; a name that exists by now is refused (SafetyError)."""

    def remember_created(self, paths: Sequence[str]) -> None:
        """Files fio just created there: later runs may write them."""

    @property
    def system(self) -> SystemRoot:
        """Its live sysfs and procfs."""

    @property
    def machine(self) -> Machine:
        """The write guard's view of it."""

    @property
    def server_name(self) -> str | None:
        """How its fio server names itself before its lines in a client's output (its hostname)."""


# --- this machine ----------------------------------------------------------------------------


@dataclass
class LocalSite:
    """This machine."""

    facts: SiteFacts
    system: SystemRoot = field(default_factory=SystemRoot)

    host = None
    label = ""
    journal_host = None
    server_name = None
    machine: Machine = LOCAL

    def alive(self) -> bool:
        """Always: this machine runs its own points."""
        return True

    def down_reason(self) -> str:
        """Never down."""
        return ""

    def lock(
        self, disks: Sequence[str], wait: LockWait | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """The per-disk ``flock`` of :mod:`iobench.system.locks`."""
        return device_lock(disks, wait)

    def tuner(self, run_dir: str) -> DeviceTuner:
        """A tuner of this machine's sysfs."""
        return DeviceTuner(sysfs=os.path.join(self.facts.fsroot, "sys"), run_dir=run_dir)

    def states(self, paths: Sequence[str]) -> dict[str, TargetState]:
        """``os.stat`` of each path, and a block device's size in sysfs."""
        return {path: _local_state(path, self.system) for path in paths}

    def edge(self, paths: Sequence[str], disks: Sequence[str], watch: Watch | None) -> PointEdge:
        """Read here; the counters are the local sampler's to take."""
        found: dict[str, Settings] = {}
        sysfs = os.path.join(self.facts.fsroot, "sys")
        for disk in disks:
            with contextlib.suppress(TuningError):
                found[disk] = read_settings(disk, sysfs=sysfs)
        return PointEdge(self.states(paths), found)

    def drop_caches(self) -> None:
        """``sync`` and ``/proc/sys/vm/drop_caches``."""
        drop_caches()

    def make_files(self, paths: Sequence[str]) -> None:
        """``O_CREAT | O_EXCL | O_NOFOLLOW``, each remembered at once (:func:`~iobench.system.created.create_target_file`)."""
        for path in paths:
            create_target_file(path)

    def remember_created(self, paths: Sequence[str]) -> None:
        """In this machine's created-files registry."""
        remember_created(paths)


def _local_state(path: str, system: SystemRoot) -> TargetState:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return TargetState(exists=False)
    except OSError as exc:
        return TargetState(exists=True, error=exc.strerror)
    if stat.S_ISBLK(info.st_mode):
        return TargetState(True, True, (info.st_rdev,), _sectors(devno_text(info.st_rdev), system))
    return TargetState(True, False, (info.st_dev, info.st_ino))


def _sectors(devno: str, system: SystemRoot) -> int | None:
    """The device's size in sectors: 0 when the kernel no longer has it, None when sysfs cannot tell."""
    entry = f"sys/dev/block/{devno}"
    if not system.exists(entry):
        return 0 if system.is_dir("sys/dev/block") else None
    return system.read_int(f"{entry}/size")


# --- a host ------------------------------------------------------------------------------------


@dataclass
class HostSite:
    """A host of the matrix, reached through its connection (:class:`~iobench.system.fleet.Host`)."""

    facts: SiteFacts
    node: Host
    monitor: HostMonitor | None = None

    @property
    def host(self) -> str:
        """The host's frame name."""
        return self.node.name

    @property
    def label(self) -> str:
        """``host a (root@storage-a): ``."""
        return f"{self.node.describe()}: "

    @property
    def server_name(self) -> str | None:
        """The host's hostname, which its fio server puts before its lines."""
        return None if self.node.facts is None else self.node.facts.hostname

    @property
    def journal_host(self) -> dict[str, Any]:
        """How the host is reached, labelled with its frame name."""
        return self.node.journal_record

    @property
    def system(self) -> SystemRoot:
        """The host's sysfs and procfs, live (structure from the preflight's snapshot)."""
        assert self.node.facts is not None
        return RemoteRoot(self.node, snapshot=self.node.facts.snapshot.root)

    @property
    def machine(self) -> Machine:
        """The guard's questions, answered on the host."""
        assert self.node.facts is not None
        return RemoteMachine(self.node, self.node.facts.snapshot)

    def alive(self) -> bool:
        """Whether its connection and server stand."""
        return self.node.alive()

    def down_reason(self) -> str:
        """Why the host cannot run points."""
        return self.node.down or ""

    @contextlib.contextmanager
    def lock(self, disks: Sequence[str], wait: LockWait | None = None) -> Iterator[object]:
        """Each disk's lock on the host (``flock``, as a run on the host itself takes them), held by its agent.

        A held one is refused at once: ``wait`` is for this machine's disks.

        Raises
        ------
        SafetyError
            When another run holds one, naming the host, the disk and the holder.
        """
        names = sorted(set(disks))
        if not names:
            yield ()
            return
        try:
            answer = self.node.call("lock", disks=names, timeout=LOCK_TIMEOUT_S)
        except AgentRefused as exc:
            raise SafetyError(f"{self.label}cannot lock its disks: {str(exc).split(': ', 1)[-1]}") from None
        busy = answer.get("busy") or {}
        if busy:
            raise SafetyError(
                "; ".join(
                    f"{self.label}another iobench run ({_holder(str(holder))}) is using {disk}; wait for it or stop it"
                    for disk, holder in sorted(busy.items())
                )
            )
        try:
            yield tuple(names)
        finally:
            with contextlib.suppress(IobenchError):
                self.node.call("unlock", disks=names)

    def tuner(self, run_dir: str) -> DeviceTuner:
        """A tuner of the host's sysfs, journalled here under the host's record."""
        return DeviceTuner(run_dir=run_dir, system=self.system, host=self.journal_host)

    def states(self, paths: Sequence[str]) -> dict[str, TargetState]:
        """One request to the host's agent for all the paths."""
        found = self.node.call("states", targets=list(paths))
        return {path: _remote_state(found.get(path) if isinstance(found, dict) else None) for path in paths}

    def edge(self, paths: Sequence[str], disks: Sequence[str], watch: Watch | None) -> PointEdge:
        """One request to the host's agent (:meth:`~iobench.system.hostmonitor.HostMonitor.edge`).

        Raises
        ------
        HostUnreachable
            When the agent is not running or does not answer.
        """
        if self.monitor is None:
            raise HostUnreachable(f"{self.label}its watch is not running")
        seen = self.monitor.edge()
        settings: dict[str, Settings] = {}
        for disk in disks:
            read = seen.settings.get(disk, {})
            scheduler, readahead = str(read.get("scheduler", "")), str(read.get("readahead_kb", ""))
            if scheduler and readahead.isdigit():
                settings[disk] = {
                    "scheduler": parse_scheduler(scheduler)[0] or "",
                    "readahead_kb": int(readahead),
                }
        states = {path: _remote_state(seen.targets.get(path)) for path in paths}
        return PointEdge(states, settings, seen.sample if watch is not None else None)

    def start_monitor(self, watch: Watch | None, interval: float) -> None:
        """Start the host's watch for the whole run (:class:`~iobench.system.hostmonitor.HostMonitor`)."""
        if self.monitor is None:
            self.monitor = HostMonitor(
                self.node,
                self.node.server_pid,
                watch,
                disks=site_disks(self),
                targets=sorted(self.facts.locations),
                interval=interval,
            ).start()

    def stop_monitor(self) -> None:
        """End the run-long watch; never raises."""
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None

    def drop_caches(self) -> None:
        """``sync`` and ``/proc/sys/vm/drop_caches`` on the host."""
        self.node.call("sync", timeout=600)
        self.system.write_attribute("/proc/sys/vm/drop_caches", "3")

    def make_files(self, paths: Sequence[str]) -> None:
        """Each made by the host's agent as here (``O_CREAT | O_EXCL | O_NOFOLLOW``), and remembered."""
        if not paths:
            return
        done = self.node.call("make_files", paths=list(paths))
        if done.get("failed") is not None:
            path = str(done["failed"])
            raise SafetyError(
                f"{self.label}target {path} appeared after the write guard judged it as a file iobench "
                "would create (made by someone else, or a link), or cannot be made; it is not written"
            )
        self.remember_created(paths)  # at once, as here: a run started meanwhile finds them iobench's

    def remember_created(self, paths: Sequence[str]) -> None:
        """In this machine's registry, keyed by how the host is reached."""
        remember_created(paths, self.machine)


def _holder(text: str) -> str:
    pid, _, started = text.strip().partition(" ")
    if not pid.isdigit():
        return "pid unknown"
    return f"pid {pid} there, started {started}" if started else f"pid {pid} there"


def _remote_state(seen: object) -> TargetState:
    """A target's state as the agent read it (:func:`iobench.agent.probe.target_state`)."""
    if not isinstance(seen, dict):
        return TargetState(exists=True, error=f"unreadable answer {seen!r}"[:200])
    if seen.get("exists") is False:
        return TargetState(exists=False)
    if seen.get("error") is not None:
        return TargetState(exists=True, error=str(seen["error"]))
    identity = seen.get("identity")
    if not isinstance(identity, list) or not all(type(i) is int for i in identity) or not identity:
        return TargetState(exists=True, error=f"unreadable answer {seen!r}"[:200])
    if seen.get("block") is True:
        sectors = seen.get("sectors")
        return TargetState(True, True, tuple(identity), sectors if type(sectors) is int else None)
    return TargetState(True, False, tuple(identity))


def site_disks(site: Site, paths: Sequence[str] | None = None) -> list[str]:
    """The disks under a site's targets (``paths``, default all), sorted."""
    locations = site.facts.locations
    wanted = locations if paths is None else {p: locations[p] for p in paths}
    return sorted({disk for location in wanted.values() for disk in location.disks})


__all__ = ["HostSite", "LocalSite", "PointEdge", "Site", "TargetState", "site_disks"]
