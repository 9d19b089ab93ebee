"""A host's counters while a point runs: the sampler of :mod:`iobench.system.sampler`, read over SSH.

One remote command per host and point (:data:`SAMPLE_SCRIPT`) prints the
host's ``/proc/stat``, the watched lines of ``/proc/diskstats`` and
``/proc/interrupts``, ``/proc/meminfo`` and every thread's ``stat`` every
``interval`` seconds; a thread here reads them into the same
:class:`~iobench.system.sampler.Snapshot` the local sampler takes, with the
same parsers (:mod:`iobench.system.hostfs`), so the host's samples are saved
and summarized by the same code. A sample's time is when it arrived here.
The last sample is taken by :meth:`RemoteSampler.stop` in one more remote
command, as the local sampler takes its last on the caller's thread.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from iobench.errors import IobenchError
from iobench.system.hostfs import (
    Interrupts,
    TaskStat,
    parse_cpu_times,
    parse_diskstats,
    parse_interrupts,
    parse_meminfo,
    parse_task_stat,
)
from iobench.system.process import stop_process
from iobench.system.sampler import Snapshot, Watch
from iobench.system.ssh import Transport

# One sample: "== <part>" headers, then the part's text. $1: "1" with threads; $2: watched devices,
# $3: watched interrupt lines (space-separated). `cat` and `grep` go on past a thread that ends.
_ONE = r"""
one() {
  echo "== stat"; cat /proc/stat
  echo "== diskstats"; awk -v w=" $2 " 'index(w, " " $3 " ")' /proc/diskstats
  echo "== interrupts"; awk -v w=" $3 " 'NR == 1 { print; next } { l = $1; sub(/:$/, "", l) } index(w, " " l " ")' /proc/interrupts
  echo "== meminfo"; cat /proc/meminfo
  if [ "$1" = 1 ]; then echo "== tasks"; grep -H '' /proc/[0-9]*/task/[0-9]*/stat 2>/dev/null; fi
  echo "@@"
}
"""

# $1-$3 as above; $4: seconds before the first sample; $5: seconds between samples; $6: most samples.
SAMPLE_SCRIPT = (
    _ONE
    + r"""
sleep "$4"
i=0
while [ "$i" -lt "$6" ]; do one "$1" "$2" "$3"; sleep "$5"; i=$((i + 1)); done
"""
)

# $1-$3 as above: one sample now.
ONCE_SCRIPT = _ONE + r"""one "$1" "$2" "$3" """


def _parts(lines: Iterator[str]) -> dict[str, list[str]]:
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if line.startswith("== "):
            current = parts.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return parts


def _tasks(lines: list[str]) -> dict[int, TaskStat]:
    found = {}
    for line in lines:
        path, sep, text = line.partition(":")
        parts = path.split("/")  # /proc/<pid>/task/<tid>/stat
        if not sep or len(parts) < 6 or not parts[2].isdigit() or not parts[4].isdigit():
            continue
        task = parse_task_stat(int(parts[2]), int(parts[4]), text.encode())
        if task is not None:
            found[task.tid] = task
    return found


def snapshot_of(t: float, lines: list[str], watch: Watch) -> Snapshot:
    """One sample's text as the local sampler's :class:`~iobench.system.sampler.Snapshot`."""
    parts = _parts(iter(lines))
    cpu = parse_cpu_times("\n".join(parts["stat"])) if "stat" in parts else None
    disks = None
    if watch.devices and "diskstats" in parts:
        stats = parse_diskstats("\n".join(parts["diskstats"]))
        disks = {d: stats[d] for d in watch.devices if d in stats}
    irqs: Interrupts | None = None
    if watch.irqs and parts.get("interrupts"):
        irqs = parse_interrupts("\n".join(parts["interrupts"]))
    mem = parse_meminfo("\n".join(parts["meminfo"])) if "meminfo" in parts else None
    tasks = _tasks(parts["tasks"]) if watch.threads and "tasks" in parts else None
    return Snapshot(t, cpu, disks, irqs, mem, tasks)


@dataclass
class RemoteSampler:
    """Samples a host's counters every ``interval`` seconds while a point runs (the local :class:`Sampler`'s twin).

    Parameters
    ----------
    host
        The host's connection.
    watch, interval, delay
        As for :class:`~iobench.system.sampler.Sampler`.
    limit_s
        The most seconds to sample (the point's timeout): the remote loop ends by itself.
    """

    host: Transport
    watch: Watch
    interval: float
    delay: float = 0.0
    limit_s: float = 3600.0
    snapshots: list[Snapshot] = field(default_factory=list)
    placed_on: tuple[int, ...] | None = None
    cpu_s: float = 0.0
    read_s: float = 0.0
    _stream: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _stopped: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _args(self) -> list[str]:
        return ["1" if self.watch.threads else "0", " ".join(self.watch.devices), " ".join(self.watch.irqs)]

    def start(self) -> RemoteSampler:
        """Start the remote loop and the thread that reads it; returns ``self``."""
        looks = max(1, int((self.limit_s - self.delay) / self.interval) + 1)
        argv = [
            "sh",
            "-c",
            SAMPLE_SCRIPT,
            "sh",
            *self._args(),
            f"{self.delay:g}",
            f"{self.interval:g}",
            str(looks),
        ]
        try:
            self._stream = self.host.stream(argv)
        except IobenchError:
            return self
        self._thread = threading.Thread(target=self._read, name="iobench-sample-host", daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._stream is not None and self._stream.stdout is not None
        used = time.thread_time()
        lines: list[str] = []
        for raw in self._stream.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line != "@@":
                lines.append(line)
                continue
            snapshot = snapshot_of(time.monotonic(), lines, self.watch)
            lines = []
            with self._lock:
                if not self._stopped:
                    self.snapshots.append(snapshot)
        self._stream.stdout.close()
        self.cpu_s += time.thread_time() - used

    def stop(self) -> list[Snapshot]:
        """End the remote loop, take the last sample now (one more command) and return every snapshot."""
        if self._stopped:
            return list(self.snapshots)
        with self._lock:
            self._stopped = True
        if self._stream is not None:
            self._stream.terminate()
            try:
                self._stream.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stop_process(self._stream)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.snapshots or self.delay <= 0:
            begun = time.perf_counter()
            with contextlib.suppress(IobenchError):
                done = self.host.run(["sh", "-c", ONCE_SCRIPT, "sh", *self._args()])
                lines = done.stdout.split("\n")
                self.snapshots.append(
                    snapshot_of(
                        time.monotonic(), lines[: lines.index("@@")] if "@@" in lines else lines, self.watch
                    )
                )
            self.read_s += time.perf_counter() - begun
        return list(self.snapshots)
