"""One light sampler of system counters while a point runs (telemetry).

A :class:`Sampler` is a thread of the iobench process. It waits out fio's
ramp, then every ``interval`` seconds reads, through the one system layer
(:class:`~iobench.system.hostfs.SystemRoot`): per-CPU times (``/proc/stat``),
the watched devices' counters (``/proc/diskstats``), the watched interrupt lines
(``/proc/interrupts``), ``/proc/meminfo`` and every thread's CPU time. It keeps
the raw counters (:class:`Snapshot`); turning them into rates is
:mod:`iobench.results.telemetry`'s job.

The thread moves itself off the point's CPUs when any other CPU is online
(``sched_setaffinity`` on the thread alone), names itself ``iobench-sample``
so it shows as itself in the thread list, and measures its own CPU time.
A counter file that cannot be read gives None in the snapshot, never an error.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from iobench.agent.probe import MEMINFO_KEPT as MEMINFO_KEPT
from iobench.system import procfs
from iobench.system.hostfs import DiskStat, Interrupts, SystemRoot, TaskStat

THREAD_NAME = "iobench-sample"
#: Seconds :meth:`Sampler.stop` waits for the thread before giving up on it.
JOIN_TIMEOUT_S = 10.0
_PR_SET_NAME = 15


@dataclass(frozen=True)
class Watch:
    """What a point's sampler reads besides CPUs, memory and threads.

    Attributes
    ----------
    devices : tuple of str
        Kernel names of block devices whose ``/proc/diskstats`` line is kept.
    irqs : tuple of str
        Interrupt lines (``/proc/interrupts`` labels, ``"36"``) whose counts are kept.
    avoid_cpus : tuple of int
        The point's CPUs: the sampler runs on the others when there are any.
    threads : bool
        Read every thread's CPU time too (the costliest part).
    """

    devices: tuple[str, ...] = ()
    irqs: tuple[str, ...] = ()
    avoid_cpus: tuple[int, ...] = ()
    threads: bool = True


@dataclass(frozen=True)
class Snapshot:
    """The counters at one moment; None where the file could not be read.

    Attributes
    ----------
    t : float
        ``time.monotonic()`` when the reading started.
    cpu : dict or None
        CPU → ticks (:data:`~iobench.system.hostfs.CPU_TIME_FIELDS`).
    disks : dict or None
        Watched device → its counters (devices the kernel does not list are absent).
    irqs : Interrupts or None
        ``/proc/interrupts`` cut down to the watched lines.
    mem : dict or None
        ``/proc/meminfo``'s :data:`MEMINFO_KEPT` lines in bytes.
    tasks : dict or None
        Thread id → its stat, when threads are watched.
    """

    t: float
    cpu: dict[int, tuple[int, ...]] | None
    disks: dict[str, DiskStat] | None
    irqs: Interrupts | None
    mem: dict[str, int] | None
    tasks: dict[int, TaskStat] | None


def take_snapshot(system: SystemRoot, watch: Watch) -> Snapshot:
    """Read every counter ``watch`` asks for once."""
    now = time.monotonic()
    cpu = procfs.cpu_times(system)
    disks = None
    if watch.devices:
        stats = procfs.diskstats(system)
        disks = None if stats is None else {d: stats[d] for d in watch.devices if d in stats}
    irqs = None
    if watch.irqs:
        table = procfs.interrupts(system)
        if table is not None:
            wanted = [i for i in watch.irqs if i in table.counts]
            irqs = Interrupts(
                table.cpus, {i: table.counts[i] for i in wanted}, {i: table.names[i] for i in wanted}
            )
    meminfo = procfs.meminfo(system)
    mem = None if meminfo is None else {k: meminfo[k] for k in MEMINFO_KEPT if k in meminfo}
    tasks = {t.tid: t for t in procfs.tasks(system)} if watch.threads else None
    return Snapshot(now, cpu, disks, irqs, mem, tasks)


@functools.cache
def _libc() -> ctypes.CDLL:
    # The process's own symbols hold libc's: no ctypes.util.find_library, which runs ldconfig.
    return ctypes.CDLL(None, use_errno=True)


def _name_thread(name: str) -> None:
    """Set the calling thread's ``comm`` (``prctl(PR_SET_NAME)``), so it shows under its own name."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        _libc().prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


@dataclass
class Sampler:
    """Samples ``watch`` every ``interval`` seconds on a thread of its own, from ``delay`` seconds after :meth:`start`.

    Parameters
    ----------
    watch : Watch
        What to read.
    interval : float
        Seconds between samples (the schedule does not drift: sample k is due
        at ``delay + k × interval``).
    delay : float
        Seconds to wait before the first sample (fio's ``ramp_time``).
    system : SystemRoot
        Where the counters are read.

    Attributes
    ----------
    snapshots : list of Snapshot
        In time order; the last one is taken when :meth:`stop` is called.
    placed_on : tuple of int or None
        The CPUs the thread ran on, when it moved off the point's CPUs; None when it could not.
    cpu_s : float
        CPU time the sampler thread used.
    read_s : float
        Wall time spent reading counters (the rest is sleep).
    """

    watch: Watch
    interval: float
    delay: float = 0.0
    system: SystemRoot = field(default_factory=SystemRoot)
    snapshots: list[Snapshot] = field(default_factory=list)
    placed_on: tuple[int, ...] | None = None
    cpu_s: float = 0.0
    read_s: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _begun: bool = field(default=False, repr=False)

    def start(self) -> Sampler:
        """Start the thread; returns ``self``.

        Without a delay, a first sample of the counters (threads left out:
        the costly part) is taken here, before the caller starts anything, so
        that no I/O can come before the first sample however late the thread
        gets a CPU.
        """
        if self.delay <= 0:
            begun = time.perf_counter()
            self.snapshots.append(take_snapshot(self.system, replace(self.watch, threads=False)))
            self.read_s += time.perf_counter() - begun
            self._begun = True
        self._thread = threading.Thread(target=self._loop, name=THREAD_NAME, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Snapshot]:
        """End the thread, take the last sample now (when sampling had begun) and return every snapshot.

        The last sample is taken on the caller's thread, once the sampler's has
        ended: no wait for a sleeping thread to get the GIL back, and the
        snapshots stay in time order. Later calls return the same snapshots.
        """
        if self._stop.is_set():
            return list(self.snapshots)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
        if self._begun:
            used = time.thread_time()
            self._sample()
            self.cpu_s += time.thread_time() - used
        return list(self.snapshots)

    def _place(self) -> None:
        self.placed_on = keep_thread_off(self.watch.avoid_cpus, self.system)

    def _sample(self) -> None:
        begun = time.perf_counter()
        self.snapshots.append(take_snapshot(self.system, self.watch))
        self.read_s += time.perf_counter() - begun

    def _loop(self) -> None:
        used = time.thread_time()
        try:
            _name_thread(THREAD_NAME)
            self._place()
            start = time.monotonic() + self.delay
            if self.delay > 0 and self._stop.wait(self.delay):
                return  # fio ended during its ramp: nothing was measured
            step = 0
            while True:
                self._sample()
                self._begun = True
                step += 1
                due = start + step * self.interval
                if self._stop.wait(max(0.0, due - time.monotonic())):
                    return  # stop() takes the last sample
        finally:
            self.cpu_s += time.thread_time() - used


def keep_thread_off(avoid_cpus: Sequence[int], system: SystemRoot) -> tuple[int, ...] | None:
    """Move the calling thread (alone) off ``avoid_cpus``, onto the other online CPUs.

    Returns the CPUs it now runs on, or ``None`` when it stays where it was
    (nothing to avoid, no other CPU online, or the kernel refused).
    """
    online = _online(system)
    others = tuple(c for c in online if c not in set(avoid_cpus))
    if not others or not avoid_cpus:
        return None
    try:
        os.sched_setaffinity(0, others)  # 0: this thread only
    except OSError:
        return None
    return others


def _online(system: SystemRoot) -> tuple[int, ...]:
    times = procfs.cpu_times(system)
    if times:
        return tuple(sorted(times))
    with contextlib.suppress(OSError):
        return tuple(sorted(os.sched_getaffinity(0)))
    return ()
