"""A host's watch for a whole run: its fio jobs' placement, its counters and each point's edges.

A host's points must cost it little: what iobench adds there is measured
against plain ``fio --client`` on the same servers. So nothing is started on
the host for a look or a sample: the host's agent (:mod:`iobench.agent`),
started once for the run, answers each request from its own reads of
``/proc`` and ``/sys``:

- ``looks`` (while a point runs: every ``tick`` while jobs are in view and
  not yet settled, every half ``interval`` before any is in view, every
  ``interval`` once all are settled): the fio server's job processes (three
  levels below it) with their allowed CPUs, memory nodes, state and, from
  their second view, their NUMA policy;
- ``sample`` (every telemetry interval while a point runs): the host's
  counters cut to what telemetry keeps, read into the same snapshots as
  this machine's sampler takes (the same parsers, :mod:`iobench.system.procfs`);
- ``edge`` (before and after each point): the disks' settings, the targets'
  state and a sample, so a point's samples begin before its first I/O and
  end after its last.

A thread here asks while a point runs and turns the answers into
:class:`Worker` views of the jobs (the placement check reads them as it
reads this machine's) and :class:`~iobench.system.sampler.Snapshot` samples.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from iobench.errors import IobenchError
from iobench.system.hostagent import AgentCaller
from iobench.system.hostfs import Interrupts, TaskStat
from iobench.system.procfs import parse_cpu_times, parse_diskstats, parse_interrupts, parse_meminfo, task_stat
from iobench.system.sampler import Snapshot, Watch
from iobench.system.ssh import COMMAND_TIMEOUT_S, HostUnreachable

JOB_DEPTH = 3
"""How far below fio's server its job processes are (server, its connection's fork, the backend, the jobs)."""


@dataclass(frozen=True)
class Worker:
    """A fio job process on a host, as its ``/proc`` showed it last.

    ``looks`` counts the views it was in. fio applies a job's ``cpus_allowed``
    and ``numa_mem_policy`` in the job process once it has started, so the
    first view may show what it inherited; its memory policy is read on its
    second view, and only workers seen twice are compared with the plan.
    """

    pid: int
    cpus: str
    mems: str
    name: str
    policy: str | None
    looks: int = 1
    zombie_looks: int = 0
    """Views in a row that showed it dead and not reaped (fio waits forever for a worker that died starting)."""

    @property
    def settled(self) -> bool:
        """Seen at least twice: its CPUs and memory policy are the job's own."""
        return self.looks >= 2


def _tasks(rows: object) -> dict[int, TaskStat]:
    """The agent's thread rows (``[pid, tid, flags, utime, stime, processor, name]``) by thread id."""
    found: dict[int, TaskStat] = {}
    for row in rows if isinstance(rows, list) else ():
        with contextlib.suppress(TypeError, ValueError):
            pid, tid, flags, utime, stime, processor, name = row
            found[int(tid)] = task_stat(
                int(pid),
                int(tid),
                str(name),
                int(flags),
                int(utime),
                int(stime),
                None if processor is None else int(processor),
            )
    return found


def _text(parts: dict[str, Any], key: str) -> str | None:
    value = parts.get(key)
    return value if isinstance(value, str) else None


def snapshot_of(t: float, parts: dict[str, Any], watch: Watch) -> Snapshot:
    """One sample from the agent (:func:`iobench.agent.probe.sample`) as the local sampler's :class:`~iobench.system.sampler.Snapshot`."""
    stat, diskstats = _text(parts, "stat"), _text(parts, "diskstats")
    interrupts, meminfo = _text(parts, "interrupts"), _text(parts, "meminfo")
    cpu = None if stat is None else parse_cpu_times(stat)
    disks = None
    if watch.devices and diskstats is not None:
        stats = parse_diskstats(diskstats)
        disks = {d: stats[d] for d in watch.devices if d in stats}
    irqs: Interrupts | None = None
    if watch.irqs and interrupts:
        irqs = parse_interrupts(interrupts)
    mem = None if meminfo is None else parse_meminfo(meminfo)
    tasks = _tasks(parts.get("tasks")) if watch.threads and parts.get("tasks") is not None else None
    return Snapshot(t, cpu, disks, irqs, mem, tasks)


def watch_args(watch: Watch) -> dict[str, Any]:
    """What the agent's ``sample`` request takes for a watch."""
    return {"devices": list(watch.devices), "irqs": list(watch.irqs), "threads": watch.threads}


@dataclass(frozen=True)
class Edge:
    """What the agent saw of a host at a point's edge."""

    settings: dict[str, dict[str, str]]
    """Each disk's ``scheduler`` and ``readahead_kb`` files as read (disks that could not be read are left out)."""
    targets: dict[str, dict[str, Any]]
    """Each target's state (:func:`iobench.agent.probe.target_state`)."""
    sample: Snapshot | None


@dataclass
class HostMonitor:
    """A host's watch for a whole run (see the module's description).

    Parameters
    ----------
    host
        The host's agent.
    server_pid
        Its fio server's pid there (None for a server given in the matrix: no jobs are looked at).
    watch
        The counters to sample (None: no telemetry).
    disks, targets
        The host's disks (settings read at each edge) and target paths (their state).
    interval
        Seconds between samples while a point runs.
    tick
        Seconds between looks at the jobs while a point runs, while a job in
        view has not been seen twice with its memory policy (or is dead); half
        an ``interval`` while none is in view yet; an ``interval`` once all are.
    """

    host: AgentCaller
    server_pid: int | None
    watch: Watch | None = None
    disks: Sequence[str] = ()
    targets: Sequence[str] = ()
    interval: float = 1.0
    tick: float = 0.25
    workers: dict[int, Worker] = field(default_factory=dict)
    samples: list[Snapshot] = field(default_factory=list)
    cpu_s: float = 0.0
    _thread: threading.Thread | None = field(default=None, repr=False)
    _lock: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _active: bool = field(default=False, repr=False)
    _stopping: bool = field(default=False, repr=False)
    _ended: str | None = field(default=None, repr=False)

    def start(self) -> HostMonitor:
        """Start the thread that asks the agent while points run; returns ``self``."""
        self._thread = threading.Thread(target=self._talk, name="iobench-watch-host", daemon=True)
        self._thread.start()
        return self

    def begin_point(self) -> None:
        """A point starts: forget the last one's jobs and samples, and look every ``tick`` until it ends."""
        with self._lock:
            self.workers = {}
            self.samples = []
            self._active = True
            self._lock.notify_all()

    def end_point(self) -> None:
        """The point's fio has ended: no more looks or samples."""
        with self._lock:
            self._active = False

    def unreaped(self) -> list[int]:
        """Job processes seen dead and not reaped in two looks in a row."""
        with self._lock:
            return [w.pid for w in self.workers.values() if w.zombie_looks >= 2]

    def samples_since(self, start: float) -> list[Snapshot]:
        """The samples taken after ``start`` (``time.monotonic()``)."""
        with self._lock:
            return [s for s in self.samples if s.t > start]

    def edge(self, timeout: float = COMMAND_TIMEOUT_S) -> Edge:
        """The disks' settings, the targets' state and (with a watch) a sample, now: one request.

        Raises
        ------
        HostUnreachable
            When the agent has ended, fails or does not answer within ``timeout`` s.
        """
        if self._ended is not None:
            raise HostUnreachable(f"host {self.host.target.describe()}: its watch ended: {self._ended}")
        t = time.monotonic()
        watch = None if self.watch is None else watch_args(self.watch)
        answer = self.host.call(
            "edge", targets=list(self.targets), disks=list(self.disks), watch=watch, timeout=timeout
        )
        try:
            settings = {str(k): dict(v) for k, v in dict(answer["settings"]).items()}
            targets = {str(k): dict(v) for k, v in dict(answer["targets"]).items()}
            parts = answer.get("sample")
        except (KeyError, TypeError, ValueError):
            raise HostUnreachable(
                f"host {self.host.target.describe()}: its agent's edge made no sense"
            ) from None
        sample = (
            snapshot_of(t, parts, self.watch) if self.watch is not None and isinstance(parts, dict) else None
        )
        return Edge(settings, targets, sample)

    def _talk(self) -> None:
        used = time.thread_time()
        slow = max(1, round(self.interval / self.tick))
        every = 0 if self.watch is None else slow
        ticks = 0
        due = time.monotonic()
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._stopping or self._active)
                if self._stopping:
                    break
                self._lock.wait_for(
                    lambda: self._stopping or not self._active, max(0.0, due - time.monotonic())
                )
                if self._stopping:
                    break
                if not self._active:
                    ticks, due = 0, time.monotonic() + self.tick
                    continue
                ticks += 1
                # The point's edge took a sample as it began: the next one an interval later.
                sample = bool(every) and ticks % every == 0
                look = self.server_pid is not None and ticks % self._look_every(slow) == 0
                policy_of = [w.pid for w in self.workers.values() if w.policy is None and w.looks >= 1]
            due = time.monotonic() + self.tick
            try:
                if look:
                    self._look(
                        self.host.call("looks", pid=self.server_pid, depth=JOB_DEPTH, policy_of=policy_of)
                    )
                if sample and self.watch is not None:
                    t = time.monotonic()
                    parts = self.host.call("sample", **watch_args(self.watch))
                    if isinstance(parts, dict):
                        with self._lock:
                            self.samples.append(snapshot_of(t, parts, self.watch))
            except IobenchError as exc:
                self._ended = str(exc)
                break
        self.cpu_s += time.thread_time() - used

    def _look_every(self, slow: int) -> int:
        """How many ticks apart the looks are now (the lock is held).

        Jobs in view and not yet settled: every tick, so each is seen twice
        early in its run. Nothing in view yet (the fio client has not reached
        this host's server; on many hosts most of them wait for it): every half
        interval. Jobs all seen twice and alive: each interval, which finds a
        new or dead one.
        """
        if not self.workers:
            return max(1, slow // 2)
        return slow if self._settled() else 1

    def _settled(self) -> bool:
        """Every job in view seen twice with its memory policy, none dead (the lock is held)."""
        return bool(self.workers) and all(
            w.settled and w.policy is not None and w.zombie_looks == 0 for w in self.workers.values()
        )

    def _look(self, rows: object) -> None:
        with self._lock:
            for row in rows if isinstance(rows, list) else ():
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    pid = int(row["pid"])
                    old = self.workers.get(pid)
                    dead = (old.zombie_looks + 1 if old else 1) if row["state"] == "Z" else 0
                    policy = old.policy if old else None
                    if isinstance(row.get("policy"), list):
                        policy = ",".join(sorted({str(p) for p in row["policy"]})) or None
                    self.workers[pid] = Worker(
                        pid,
                        str(row["cpus"]),
                        str(row["mems"]),
                        str(row["name"]),
                        policy,
                        old.looks + 1 if old else 1,
                        dead,
                    )

    def stop(self) -> None:
        """End the thread; bounded, never raises (the agent itself is the fleet's to end)."""
        with self._lock:
            self._active = False
            self._stopping = True
            self._ended = self._ended or "it was stopped"
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=COMMAND_TIMEOUT_S + 5)
