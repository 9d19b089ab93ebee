"""One agent per host for a whole run: its fio jobs' placement, its counters and each point's edges.

A host's points must cost it little: what iobench adds there is measured
against plain ``fio --client`` on the same servers. So each host has one shell
(:data:`AGENT_SCRIPT`), started once per run in one SSH session, that does
nothing until asked and never starts a program for a look. This machine asks,
one line at a time, and the agent answers in order:

- ``L`` (a look while a point runs: every ``tick`` while jobs are in view
  and not yet settled, every half ``interval`` before any is in view, every
  ``interval`` once all are settled): walk the fio server's
  process tree down to the job processes with the shell's own ``read`` and
  print each job's allowed CPUs, memory nodes, state and, once, its NUMA policy;
- ``S`` (every telemetry interval while a point runs): one sample of the
  host's counters, read by ``awk`` into the same snapshots as this machine's
  sampler takes (the same parsers, :mod:`iobench.system.procfs`). With mawk
  one ``awk`` serves the whole run; with any other awk one is started a sample;
- ``E`` (before and after each point): the disks' settings, the targets'
  state and a sample, so a point's samples begin before its first I/O and
  end after its last;
- ``LS``: both, answered in one write (the look's end marker after the sample);
- ``B`` (a point begins): forget the last point's jobs.

A reader thread here sends the ticks while a point runs and turns the
answers into :class:`Worker` views of the jobs (the placement check reads them
as it reads this machine's), :class:`~iobench.system.sampler.Snapshot`
samples and :class:`Edge` answers.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from iobench.errors import IobenchError
from iobench.system.hostfs import Interrupts, TaskStat
from iobench.system.process import stop_process
from iobench.system.procfs import (
    TASK_STAT_FIELDS,
    parse_cpu_times,
    parse_diskstats,
    parse_interrupts,
    parse_meminfo,
    task_stat,
)
from iobench.system.sampler import MEMINFO_KEPT, Snapshot, Watch
from iobench.system.ssh import COMMAND_TIMEOUT_S, HostUnreachable, Transport


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


def _with_fields(script: str) -> str:
    """``script`` with each ``@field@`` of :data:`TASK_STAT_FIELDS` as awk numbers it (from 1)."""
    for name, at in TASK_STAT_FIELDS.items():
        script = script.replace(f"@{name}@", str(at + 1))
    return script


# The host's counters, read by awk: "== <part>" before each part, "@@S" after a sample. /proc/stat
# is cut to its per-CPU lines and /proc/meminfo to MEMINFO_KEPT, as the local sampler keeps them.
# A thread is one short line, "pid tid flags utime stime processor name" (its stat's fields that
# telemetry keeps, TASK_STAT_FIELDS; the name last, after its last ")"): a host with thousands of
# threads sends a few dozen bytes for each, not its whole stat line, every sample.
# Every file is read with getline, so a thread that ended since the shell listed it is skipped.
# D, I and M: the watched devices, interrupt lines and meminfo keys, space-separated with a space
# at each end; T: 1 to read every thread's stat.
#
# Two ways to run it. ONCE=1: one sample of the thread stats named in ARGV, then exit (a program
# started for each sample). ONCE=0: one awk for the whole run, reading the agent's output on its
# input: "@@t <path>" names a thread's stat for the next sample, "@@sample <line>" takes it (the
# line printed after "@@S"), and every other line is passed on. Answers go out in one write each
# (each write is a packet over SSH): at the end of a sample, a look ("@@V") and an edge ("@@E").
SAMPLE_AWK = _with_fields(
    r"""
function sample(x,   line, w, head, label, key, i, f, e, k, b, n, p) {
  out = out "== stat\n"
  while ((getline line < "/proc/stat") > 0) if (line ~ /^cpu[0-9]/) out = out line "\n"
  close("/proc/stat")
  out = out "== diskstats\n"
  while ((getline line < "/proc/diskstats") > 0) {
    split(line, w, " "); if (index(D, " " w[3] " ")) out = out line "\n"
  }
  close("/proc/diskstats")
  out = out "== interrupts\n"; head = 1
  while ((getline line < "/proc/interrupts") > 0) {
    if (head) { out = out line "\n"; head = 0; continue }
    split(line, w, " "); label = w[1]; sub(/:$/, "", label); if (index(I, " " label " ")) out = out line "\n"
  }
  close("/proc/interrupts")
  out = out "== meminfo\n"
  while ((getline line < "/proc/meminfo") > 0) {
    key = line; sub(/:.*/, "", key); if (index(M, " " key " ")) out = out line "\n"
  }
  close("/proc/meminfo")
  if (T == 1) {
    out = out "== tasks\n"
    for (i = 1; i <= nt; i++) {
      f = task[i]
      if ((getline line < f) > 0) {
        e = 0; while ((k = index(substr(line, e + 1), ")")) > 0) e += k
        b = index(line, "("); n = split(substr(line, e + 2), w, " "); split(f, p, "/")
        out = out p[3] " " p[5] " " w[@flags@] " " w[@utime@] " " w[@stime@] " " \
          (n >= @processor@ ? w[@processor@] : "-") " " substr(line, b + 1, e - b - 1) "\n"
      }
      close(f)
    }
  }
  out = out "@@S\n"
  if (x != "") out = out x "\n"
  nt = 0
}
function send() { printf "%s", out; fflush(); out = "" }
BEGIN {
  if (ONCE == 1) { for (nt = 0; nt + 1 < ARGC; nt++) task[nt + 1] = ARGV[nt + 1]; sample(X); send(); exit }
}
substr($0, 1, 4) == "@@t " { task[++nt] = substr($0, 5); next }
substr($0, 1, 9) == "@@sample " { sample(substr($0, 10)); send(); next }
{ out = out $0 "\n"; if ($0 == "@@V" || $0 == "@@E") send() }
"""
)

# $1: the fio server's pid (0: not known); $2: "1" to sample; $3: "1" with threads; $4: devices;
# $5: interrupt lines; $6: meminfo keys; $7: SAMPLE_AWK; $8: how many disks follow; then the disks,
# then the targets. Reads one command a line (see the module's description) until its input ends.
# With mawk (Debian's and Ubuntu's awk) one awk takes every sample of the run: the commands' answers
# go through it ("-W interactive": mawk otherwise waits for a full buffer of input before it reads a
# line). Any other awk is started once for each sample, as it may hold its input back the same way.
AGENT_SCRIPT = r"""
srv=$1; S=$2; T=$3; D=" $4 "; I=" $5 "; M=" $6 "; A=$7; n=$8; shift 8
disks=
while [ "$n" -gt 0 ]; do disks="$disks $1"; shift; n=$((n - 1)); done
NL='
'
kids() { K=; for t in /proc/$1/task/*/children; do k=; read -r k <"$t" 2>/dev/null; K="$K $k"; done; }
jobs() {
  J=; [ "$srv" -gt 0 ] || return 0
  kids "$srv"; for a in $K; do kids "$a"; for b in $K; do kids "$b"; J="$J $K"; done; done
}
look() {
  for p in $J; do
    nm=; pp=; st=; c=; m=
    while read -r key val rest; do
      case $key in Name:) nm=$val;; State:) st=$val;; PPid:) pp=$val;; Cpus_allowed_list:) c=$val;;
        Mems_allowed_list:) m=$val; break;; esac
    done <"/proc/$p/status" 2>/dev/null
    [ -n "$pp" ] && O="$O${NL}P $p $pp $c $m $st $nm"
    case "$once" in *" $p "*) ;; *)
      case "$seen" in *" $p "*)
        pol=; i=0
        while [ "$i" -lt 16 ] && read -r addr policy rest; do pol="$pol $policy"; i=$((i + 1)); done <"/proc/$p/numa_maps" 2>/dev/null
        O="$O${NL}N $p$pol"; once="$once$p ";;
      *) seen="$seen$p ";; esac;;
    esac
  done
}
# $1...$5: a target's mode, major and minor (hex), device and inode; a block device's size in sectors after.
state() {
  sz=-
  case "$1" in 6???) sz=0; read -r sz <"/sys/dev/block/$((0x$2)):$((0x$3))/size" 2>/dev/null;; esac
  O="$O${NL}T $1 $2 $3 $4 $5 $sz"
}
edge() {
  O="@@e"
  for d in $disks; do
    s=; read -r s <"/sys/block/$d/queue/scheduler" 2>/dev/null; O="$O${NL}Q $d $s"
    r=; read -r r <"/sys/block/$d/queue/read_ahead_kb" 2>/dev/null; O="$O${NL}R $d $r"
  done
  # One stat for every target while all are there; one each, with why, when one is not.
  if [ $# -gt 0 ] && out=$(stat -L -c '%f %t %T %d %i' -- "$@" 2>/dev/null); then
    for p; do state ${out%%"$NL"*}; out=${out#*"$NL"}; done
  else
    for p; do
      if s=$(stat -L -c '%f %t %T %d %i' -- "$p" 2>&1); then state $s
      else case "$s" in *"No such file"*) O="$O${NL}T -";; *) O="$O${NL}T E ${s##*: }";; esac; fi
    done
  fi
  if [ "$S" = 1 ]; then printf '%s\n' "$O"; sample "@@E"; else printf '%s\n' "$O" "@@E"; fi
}
serve() {
  seen=' '; once=' '
  while read -r cmd; do
    case $cmd in
      L) jobs; O="@@P"; look; printf '%s\n' "$O" "@@V";;
      S) sample "";;
      LS) jobs; O="@@P"; look; printf '%s\n' "$O"; sample "@@V";;
      E) edge "$@";;
      B) seen=' '; once=' ';;
    esac
  done
}
kind=; [ "$S" = 1 ] && kind=$(awk -W version 2>/dev/null </dev/null)
case $kind in
  mawk*)
    # $1: the line after the sample.
    sample() {
      [ "$T" = 1 ] && printf '@@t %s\n' /proc/[0-9]*/task/[0-9]*/stat
      printf '@@sample %s\n' "$1"
    }
    serve "$@" | awk -W interactive -v D="$D" -v I="$I" -v M="$M" -v T="$T" -v ONCE=0 "$A";;
  *)
    sample() {
      x=$1; if [ "$T" = 1 ]; then set -- /proc/[0-9]*/task/[0-9]*/stat; else set --; fi
      awk -v D="$D" -v I="$I" -v M="$M" -v T="$T" -v ONCE=1 -v X="$x" "$A" "$@"
    }
    serve "$@";;
esac
"""


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
    """The agent's thread lines (``pid tid flags utime stime processor name``) by thread id."""
    found = {}
    for line in lines:
        words = line.split(" ", 6)
        if len(words) < 7:
            continue
        try:
            pid, tid, flags, utime, stime = (int(w) for w in words[:5])
            processor = None if words[5] == "-" else int(words[5])
        except ValueError:
            continue
        found[tid] = task_stat(pid, tid, words[6], flags, utime, stime, processor)
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
    """What the agent saw of a host at a point's edge."""

    schedulers: dict[str, str]
    readahead_kb: dict[str, str]
    targets: dict[str, str]
    """Each target's state line (``T``'s words: mode, major, minor, device, inode, sectors; ``-``; ``E why``)."""
    sample: Snapshot | None


@dataclass
class HostMonitor:
    """A host's agent for a whole run (see the module's description).

    Parameters
    ----------
    host
        The host's connection.
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

    host: Transport
    server_pid: int | None
    watch: Watch | None = None
    disks: Sequence[str] = ()
    targets: Sequence[str] = ()
    interval: float = 1.0
    tick: float = 0.25
    workers: dict[int, Worker] = field(default_factory=dict)
    samples: list[Snapshot] = field(default_factory=list)
    cpu_s: float = 0.0
    _stream: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _lock: threading.Condition = field(default_factory=threading.Condition, repr=False)
    _active: bool = field(default=False, repr=False)
    _ended: str | None = field(default=None, repr=False)
    _edge: Edge | None = field(default=None, repr=False)
    _waiting: bool = field(default=False, repr=False)

    def start(self) -> HostMonitor:
        """Start the agent and the thread that talks to it; returns ``self``."""
        watch = self.watch
        argv = [
            "sh",
            "-c",
            AGENT_SCRIPT,
            "sh",
            str(self.server_pid or 0),
            "0" if watch is None else "1",
            "1" if watch is not None and watch.threads else "0",
            " ".join(watch.devices) if watch is not None else "",
            " ".join(watch.irqs) if watch is not None else "",
            " ".join(MEMINFO_KEPT),
            SAMPLE_AWK,
            str(len(self.disks)),
            *self.disks,
            *self.targets,
        ]
        try:
            self._stream = self.host.stream(argv, stdin=True)
        except IobenchError as exc:
            self._ended = str(exc)
            return self
        self._thread = threading.Thread(target=self._talk, name="iobench-watch-host", daemon=True)
        self._thread.start()
        return self

    def begin_point(self) -> None:
        """A point starts: forget the last one's jobs and samples, and look every ``tick`` until it ends."""
        with self._lock:
            self.workers = {}
            self.samples = []
            self._send(b"B\n")
            self._active = True

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
        """The disks' settings, the targets' state and (with a watch) a sample, now.

        Raises
        ------
        HostUnreachable
            When the agent has ended or does not answer within ``timeout`` s.
        """
        with self._lock:
            self._edge, self._waiting = None, True
            self._send(b"E\n")
            answered = self._lock.wait_for(lambda: self._edge is not None or self._ended is not None, timeout)
            edge, self._edge, self._waiting = self._edge, None, False
        if edge is None:
            why = self._ended if answered else f"no answer in {timeout:g} s"
            raise HostUnreachable(f"host {self.host.target.describe()}: its watch ended: {why}")
        return edge

    def _send(self, line: bytes) -> None:
        # Under the lock. A closed pipe means the agent ended; the reader says why.
        stream = self._stream
        if stream is None or stream.stdin is None or self._ended is not None:
            return
        try:
            stream.stdin.write(line)
            stream.stdin.flush()
        except (OSError, ValueError):
            self._ended = "its session closed"
            self._lock.notify_all()

    def _talk(self) -> None:
        assert self._stream is not None and self._stream.stdout is not None
        used = time.thread_time()
        fd = self._stream.stdout.fileno()
        slow = max(1, round(self.interval / self.tick))
        every = 0 if self.watch is None else slow
        ticks, due, rest = 0, time.monotonic(), b""
        reader = _Reader(self)
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                if selector.select(max(0.0, due - time.monotonic())):
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        break
                    *lines, rest = (rest + chunk).split(b"\n")
                    for line in lines:
                        reader.line(line.decode(errors="replace"))
                now = time.monotonic()
                if now >= due:
                    with self._lock:
                        if self._active:
                            # The point's edge took a sample as it began: the next one an interval later.
                            ticks += 1
                            sample = bool(every) and ticks % every == 0
                            look = ticks % self._look_every(slow) == 0
                            if look or sample:
                                self._send(b"LS\n" if look and sample else b"L\n" if look else b"S\n")
                        else:
                            ticks = 0
                    due = now + self.tick
        self._stream.stdout.close()
        with self._lock:
            self._ended = self._ended or "its session closed"
            self._lock.notify_all()
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

    def _answered(self, edge: Edge) -> None:
        with self._lock:
            if self._waiting:
                self._edge = edge
                self._lock.notify_all()

    def _sampled(self, snapshot: Snapshot) -> None:
        with self._lock:
            self.samples.append(snapshot)

    def stop(self) -> None:
        """End the agent (its input closes) and the thread; bounded, never raises."""
        stream = self._stream
        if stream is None:
            return
        with self._lock:
            self._active = False
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


@dataclass
class _Reader:
    """The agent's answers, a line at a time, into the monitor's views, samples and edges."""

    monitor: HostMonitor
    view: list[str] = field(default_factory=list)
    sample: list[str] | None = None
    edge: list[str] | None = None
    edge_sample: Snapshot | None = None

    def line(self, line: str) -> None:
        monitor = self.monitor
        if self.sample is not None:
            if line != "@@S":
                self.sample.append(line)
                return
            snapshot = snapshot_of(time.monotonic(), self.sample, monitor.watch) if monitor.watch else None
            self.sample = None
            if self.edge is not None:
                self.edge_sample = snapshot
            elif snapshot is not None:
                monitor._sampled(snapshot)
        elif line.startswith("== "):
            self.sample = [line]
        elif line == "@@P":
            self.view = []
        elif line == "@@V":
            monitor._look(self.view)
        elif line == "@@e":
            self.edge, self.edge_sample = [], None
        elif line == "@@E" and self.edge is not None:
            monitor._answered(self._edge(self.edge, self.edge_sample))
            self.edge = None
        elif self.edge is not None:
            self.edge.append(line)
        else:
            self.view.append(line)

    def _edge(self, lines: list[str], sample: Snapshot | None) -> Edge:
        schedulers: dict[str, str] = {}
        readahead: dict[str, str] = {}
        states: list[str] = []
        for line in lines:
            kind, _, rest = line.partition(" ")
            if kind in ("Q", "R"):
                disk, _, value = rest.partition(" ")
                (schedulers if kind == "Q" else readahead)[disk] = value
            elif kind == "T":
                states.append(rest)
        targets = list(self.monitor.targets)
        states += [""] * (len(targets) - len(states))
        return Edge(schedulers, readahead, dict(zip(targets, states, strict=False)), sample)
