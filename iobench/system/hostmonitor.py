"""One watcher per host for a whole run: its fio jobs' placement and its counters, at a flat cost.

A host's points used to cost several SSH commands each (a process-table
stream, a sampler stream, a last sample, settings and target checks), each a
new ssh client here and a shell there. Now each host has:

- :class:`HostMonitor`, one remote loop for the whole run (:data:`MONITOR_SCRIPT`):
  every ``tick`` it walks the fio server's process tree down to the job
  processes with the shell's own ``read`` (no program started while no point
  runs) and prints each job's allowed CPUs, memory nodes, state and, once, its
  NUMA policy; while jobs run it also prints the host's counters every
  telemetry interval, read into the same snapshots as this machine's sampler takes (the same parsers, :mod:`iobench.system.hostfs`).
- :func:`point_edge`, one command before and one after each point
  (:data:`EDGE_SCRIPT`): the targets' state, the disks' settings and a sample
  of the counters at that moment, so a point's samples begin before its first
  I/O and end after its last.

A reader thread here turns the loop's output into :class:`Worker` views of
the jobs (the placement check reads them as it reads this machine's) and
:class:`~iobench.system.sampler.Snapshot` samples.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from iobench.errors import IobenchError
from iobench.system.hostfs import Interrupts, TaskStat
from iobench.system.process import stop_process
from iobench.system.procfs import (
    parse_cpu_times,
    parse_diskstats,
    parse_interrupts,
    parse_meminfo,
    parse_task_stat,
)
from iobench.system.sampler import Snapshot, Watch
from iobench.system.ssh import Transport


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


# One sample of the host's counters (remotesampler's parts), "@@S" after it. $T: "1" with threads;
# $D, $I: watched devices and interrupt lines, space-separated.
_SAMPLE = r"""
sample() {
  echo "== stat"; cat /proc/stat
  echo "== diskstats"; awk -v w=" $D " 'index(w, " " $3 " ")' /proc/diskstats
  echo "== interrupts"; awk -v w=" $I " 'NR == 1 { print; next } { l = $1; sub(/:$/, "", l) } index(w, " " l " ")' /proc/interrupts
  echo "== meminfo"; cat /proc/meminfo
  if [ "$T" = 1 ]; then echo "== tasks"; grep -H '' /proc/[0-9]*/task/[0-9]*/stat 2>/dev/null; fi
  echo "@@S"
}
"""

# $1: the fio server's pid; $2: seconds between looks; $3: looks between samples (0: no samples);
# $4: "1" with threads; $5: devices; $6: interrupt lines. Runs until its input ends.
MONITOR_SCRIPT = (
    _SAMPLE
    + r"""
srv=$1; tick=$2; every=$3; T=$4; D=$5; I=$6
kids() { K=; for t in /proc/$1/task/*/children; do k=; read -r k <"$t" 2>/dev/null; K="$K $k"; done; }
jobs() { J=; kids "$srv"; for a in $K; do kids "$a"; for b in $K; do kids "$b"; J="$J $K"; done; done; }
look() {
  for p in $J; do
    n=; pp=; st=; c=; m=
    while read -r key val rest; do
      case $key in Name:) n=$val;; State:) st=$val;; PPid:) pp=$val;; Cpus_allowed_list:) c=$val;; Mems_allowed_list:) m=$val;; esac
    done <"/proc/$p/status" 2>/dev/null
    [ -n "$pp" ] && echo "P $p $pp $c $m $st $n"
    case "$once" in *" $p "*) ;; *)
      case "$seen" in *" $p "*)
        pol=; i=0
        while [ "$i" -lt 16 ] && read -r addr policy rest; do pol="$pol $policy"; i=$((i + 1)); done <"/proc/$p/numa_maps" 2>/dev/null
        echo "N $p$pol"; once="$once$p ";;
      *) seen="$seen$p ";; esac;;
    esac
  done
}
# The loop ends when its input does (the run closes it, dies, or the connection drops). A background
# list reads /dev/null unless told otherwise: the input goes to it through fd 3.
exec 3<&0
( cat <&3 >/dev/null; kill -TERM $$ 2>/dev/null ) &
exec 3<&-
trap 'exit 0' TERM HUP PIPE
seen=' '; once=' '; i=0
while :; do
  jobs
  if [ -n "${J# }" ] && [ -n "$J" ]; then
    echo "@@P"; look; echo "@@V"
    if [ "$every" -gt 0 ] && [ $((i % every)) -eq 0 ]; then sample; fi
    i=$((i + 1))
  else
    i=0; seen=' '; once=' '
  fi
  sleep "$tick"
done
"""
)

# $1: "1" with threads; $2: devices; $3: interrupt lines; $4: how many disks follow; then the disks,
# then target paths. The disks' scheduler and readahead ("Q <disk> <scheduler line> / R <disk> <kb>"),
# each target's state (STATES_SCRIPT's lines, "T " before each), then a sample.
EDGE_SCRIPT = (
    _SAMPLE
    + r"""
T=$1; D=$2; I=$3; n=$4; shift 4
while [ "$n" -gt 0 ]; do
  q=/sys/block/$1/queue
  s=; read -r s <"$q/scheduler" 2>/dev/null; echo "Q $1 $s"
  r=; read -r r <"$q/read_ahead_kb" 2>/dev/null; echo "R $1 $r"
  shift; n=$((n - 1))
done
for p; do
  if ! s=$(stat -L -c '%f %t %T %d %i' -- "$p" 2>&1); then
    case "$s" in *"No such file"*) echo "T -";; *) echo "T E ${s##*: }";; esac
    continue
  fi
  set -- $s "$@"
  sz=-
  case "$1" in 6???) read -r sz <"/sys/dev/block/$(printf '%d:%d' "0x$2" "0x$3")/size" 2>/dev/null || sz=0;; esac
  echo "T $1 $2 $3 $4 $5 $sz"
  shift 5
done
[ "$T" = - ] || sample
"""
)


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


@dataclass(frozen=True)
class Edge:
    """What one command before or after a point saw on a host."""

    schedulers: dict[str, str]
    readahead_kb: dict[str, str]
    targets: list[str]
    """Each target's state line (:data:`iobench.runner.sites.STATES_SCRIPT`'s form), in the order asked."""
    sample: Snapshot | None


def point_edge(host: Transport, watch: Watch | None, disks: Sequence[str], paths: Sequence[str]) -> Edge:
    """One command: the disks' settings, the targets' state and (with ``watch``) a sample of the counters.

    Raises
    ------
    HostUnreachable
        When the host does not answer.
    """
    flags = (
        ["-", "", ""]
        if watch is None
        else ["1" if watch.threads else "0", " ".join(watch.devices), " ".join(watch.irqs)]
    )
    done = host.run(["sh", "-c", EDGE_SCRIPT, "sh", *flags, str(len(disks)), *disks, *paths])
    taken = time.monotonic()
    schedulers, readahead, targets, rest = {}, {}, [], []
    sampling = False
    for line in done.stdout.split("\n"):
        if sampling:
            rest.append(line)
        elif line.startswith("Q "):
            _, disk, value = (line.split(" ", 2) + [""])[:3]
            schedulers[disk] = value
        elif line.startswith("R "):
            _, disk, value = (line.split(" ", 2) + [""])[:3]
            readahead[disk] = value
        elif line.startswith("T "):
            targets.append(line[2:])
        elif line.startswith("== "):
            sampling = True
            rest.append(line)
    sample = None
    if watch is not None and "@@S" in rest:
        sample = snapshot_of(taken, rest[: rest.index("@@S")], watch)
    return Edge(schedulers, readahead, targets, sample)


@dataclass
class HostMonitor:
    """A host's fio jobs and counters for a whole run, from one remote loop (see the module's description).

    Parameters
    ----------
    host
        The host's connection.
    server_pid
        Its fio server's pid there.
    watch
        The counters to sample while jobs run (None: no telemetry).
    interval
        Seconds between samples.
    tick
        Seconds between looks at the jobs.
    """

    host: Transport
    server_pid: int
    watch: Watch | None = None
    interval: float = 1.0
    tick: float = 0.25
    workers: dict[int, Worker] = field(default_factory=dict)
    samples: list[Snapshot] = field(default_factory=list)
    cpu_s: float = 0.0
    _stream: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self) -> HostMonitor:
        """Start the remote loop and the thread that reads it; returns ``self``."""
        watch = self.watch
        every = 0 if watch is None else max(1, round(self.interval / self.tick))
        argv = [
            "sh",
            "-c",
            MONITOR_SCRIPT,
            "sh",
            str(self.server_pid),
            f"{self.tick:g}",
            str(every),
            "1" if watch is not None and watch.threads else "0",
            " ".join(watch.devices) if watch is not None else "",
            " ".join(watch.irqs) if watch is not None else "",
        ]
        try:
            self._stream = self.host.stream(argv, stdin=True)
        except IobenchError:
            return self
        self._thread = threading.Thread(target=self._read, name="iobench-watch-host", daemon=True)
        self._thread.start()
        return self

    def begin_point(self) -> None:
        """A point starts: forget the last one's jobs and samples."""
        with self._lock:
            self.workers = {}
            self.samples = []

    def unreaped(self) -> list[int]:
        """Job processes seen dead and not reaped in two looks in a row."""
        with self._lock:
            return [w.pid for w in self.workers.values() if w.zombie_looks >= 2]

    def samples_since(self, start: float) -> list[Snapshot]:
        """The loop's samples taken after ``start`` (``time.monotonic()``)."""
        with self._lock:
            return [s for s in self.samples if s.t > start]

    def _read(self) -> None:
        assert self._stream is not None and self._stream.stdout is not None
        used = time.thread_time()
        view: list[str] = []
        sample: list[str] = []
        in_sample = False
        for raw in self._stream.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if in_sample:
                if line == "@@S":
                    snapshot = snapshot_of(time.monotonic(), sample, self.watch) if self.watch else None
                    if snapshot is not None:
                        with self._lock:
                            self.samples.append(snapshot)
                    sample, in_sample = [], False
                else:
                    sample.append(line)
            elif line == "@@P":
                view = []
            elif line == "@@V":
                self._look(view)
            elif line.startswith("== "):
                in_sample, sample = True, [line]
            else:
                view.append(line)
        self._stream.stdout.close()
        self.cpu_s += time.thread_time() - used

    def _look(self, lines: list[str]) -> None:
        with self._lock:
            for line in lines:
                if line.startswith("P "):
                    parts = line[2:].split(" ", 5)
                    if len(parts) < 6 or not parts[0].isdigit():
                        continue
                    pid = int(parts[0])
                    old = self.workers.get(pid)
                    dead = (old.zombie_looks + 1 if old else 1) if parts[4] == "Z" else 0
                    self.workers[pid] = Worker(
                        pid,
                        parts[2],
                        parts[3],
                        parts[5],
                        old.policy if old else None,
                        old.looks + 1 if old else 1,
                        dead,
                    )
                elif line.startswith("N "):
                    words = line[2:].split()
                    if words and words[0].isdigit() and int(words[0]) in self.workers:
                        pid = int(words[0])
                        policy = ",".join(sorted(set(words[1:]))) or None
                        self.workers[pid] = replace(self.workers[pid], policy=policy)

    def stop(self) -> None:
        """End the loop (its input closes) and the thread; bounded, never raises."""
        stream = self._stream
        if stream is None:
            return
        if stream.stdin is not None:
            with contextlib.suppress(OSError):
                stream.stdin.close()
        try:
            stream.wait(timeout=5)
        except subprocess.TimeoutExpired:
            stop_process(stream)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._stream = None
