"""What each host's ``/proc`` shows of the fio jobs its server runs while a point lasts (:class:`Observers`).

fio's server, not numactl, starts the jobs on a host, with the binding in
the job file; so placement is verified by watching the host's processes, as
:mod:`iobench.system.observe` watches this machine's.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from iobench.errors import IobenchError
from iobench.system.process import stop_process
from iobench.system.remote import (
    PROC_AWK,
    WATCH_SCRIPT,
    ProcEntry,
    descendants_in,
    numa_policies,
    parse_proc_line,
)
from iobench.system.ssh import COMMAND_TIMEOUT_S, Transport


class Watched(Protocol):
    """A host whose server's jobs are watched: its frame name, its connection, its server's pid."""

    @property
    def name(self) -> str:
        """The frame's ``host``."""

    @property
    def connection(self) -> Transport:
        """Its connection (commands and streams)."""

    @property
    def server_pid(self) -> int | None:
        """Its fio server's pid there."""


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


# The server forks a process per connection, which forks the backend, which forks the jobs.
WORKER_DEPTH = 3


class Observers:
    """Watches the fio jobs of each host's server while a point runs; :meth:`stop` ends it.

    One remote command per host and point streams the host's process table
    every ``interval`` seconds (:data:`~iobench.system.remote.WATCH_SCRIPT`),
    read by a thread here; the memory policy of new job processes costs one
    more command per batch of them. Only the job processes
    (:data:`WORKER_DEPTH` below the server) are kept: the binding is in the job
    file, so the server and the backend above the jobs run unbound.
    """

    def __init__(self, hosts: Sequence[Watched], interval: float, limit_s: float) -> None:
        self.hosts = list(hosts)
        self.interval = interval
        self.looks = max(1, int(limit_s / interval) + 1)
        self.seen: dict[str, dict[int, Worker]] = {h.name: {} for h in hosts}
        self._streams: list[subprocess.Popen[bytes]] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Observers:
        for host in self.hosts:
            argv = ["sh", "-c", WATCH_SCRIPT, "sh", f"{self.interval:g}", str(self.looks), PROC_AWK]
            try:
                stream = host.connection.stream(argv)
            except IobenchError:
                continue
            self._streams.append(stream)
            thread = threading.Thread(
                target=self._read, args=(host, stream), name=f"iobench-watch-{host.name}"
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop watching: the streams end, the threads finish (bounded)."""
        for stream in self._streams:
            # An ssh client with nothing below it: no process tree to walk (stop_process's fallback).
            stream.terminate()
            try:
                stream.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stop_process(stream)
        for thread in self._threads:
            thread.join(timeout=COMMAND_TIMEOUT_S)
        self._streams.clear()
        self._threads.clear()

    def _read(self, host: Watched, stream: subprocess.Popen[bytes]) -> None:
        assert stream.stdout is not None
        table: dict[int, ProcEntry] = {}
        for raw in stream.stdout:
            line = raw.decode(errors="replace")
            if line.startswith("@@"):
                with contextlib.suppress(IobenchError):
                    self.look(host, table)
                table = {}
                continue
            entry = parse_proc_line(line)
            if entry is not None:
                table[entry.pid] = entry
        stream.stdout.close()

    def look(self, host: Watched, table: dict[int, ProcEntry]) -> None:
        """Take in one view of the host's process table."""
        if host.server_pid is None:
            return
        depth = descendants_in(table, host.server_pid)
        seen = self.seen[host.name]
        fresh = []
        for pid, level in depth.items():
            entry = table[pid]
            if level < WORKER_DEPTH or not entry.name.startswith("fio"):
                continue
            old = seen.get(pid)
            looks = old.looks + 1 if old else 1
            dead = (old.zombie_looks + 1 if old else 1) if entry.state == "Z" else 0
            policy = old.policy if old else None
            seen[pid] = Worker(pid, entry.cpus, entry.mems, entry.name, policy, looks, dead)
            if looks == 2 and not dead:
                fresh.append(pid)
        for pid, policy in numa_policies(host.connection, fresh).items():
            if policy is not None and pid in seen:
                seen[pid] = replace(seen[pid], policy=policy)

    def unreaped(self, host: str) -> list[int]:
        """Workers of ``host`` seen dead and not reaped in two views in a row."""
        return [w.pid for w in self.seen.get(host, {}).values() if w.zombie_looks >= 2]
