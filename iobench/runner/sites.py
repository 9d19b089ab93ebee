"""Where a point's fio runs: this machine, or a host through its fio server — one interface for both.

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

from iobench.errors import SafetyError, TuningError
from iobench.planner.plans import SiteFacts
from iobench.system.created import create_target_file
from iobench.system.fleet import Host
from iobench.system.hostfs import SystemRoot, devno_text
from iobench.system.hostmonitor import HostMonitor
from iobench.system.locks import device_lock
from iobench.system.remote import RemoteRoot
from iobench.system.remoteguard import RemoteMachine
from iobench.system.safety import LOCAL, Machine, remember_created
from iobench.system.sampler import Snapshot, Watch
from iobench.system.ssh import HostUnreachable, end_session, first_line
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

    def lock(self, disks: Sequence[str]) -> contextlib.AbstractContextManager[object]:
        """Hold each disk's iobench lock there for the block; a held one is refused at once."""

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

    def lock(self, disks: Sequence[str]) -> contextlib.AbstractContextManager[object]:
        """The per-disk ``flock`` of :mod:`iobench.system.locks`."""
        return device_lock(disks)

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

# $1: the file just locked ("" at first); $2...: lock files still to take. $0 is this script: each
# level holds one lock through `flock FILE sh -c SCRIPT ...`, writes who holds it into the file, and
# passes the rest on; the last prints "locked" and holds every lock until its input ends. A lock
# held by another run makes flock exit 75 at once.
LOCK_SCRIPT = r"""
if [ -n "$1" ]; then printf '%s %s\n' "$$" "$(date +%Y-%m-%dT%H:%M:%S%z)" >"$1"; fi
shift
if [ "$#" -eq 0 ]; then echo locked; exec cat >/dev/null; fi
f=$1; shift
exec flock -n -E 75 "$f" sh -c "$0" "$0" "$f" "$@"
"""

# $1...: disk names. The folder of the lock files (made), then "busy <disk> <holder>" for each
# disk another process holds the lock of.
LOCK_FOLDER_SCRIPT = r"""
dir=${XDG_STATE_HOME:-$HOME/.local/state}/iobench/locks
mkdir -p -- "$dir" || exit 1
command -v flock >/dev/null 2>&1 || { echo "error flock is not installed there (util-linux)"; exit 1; }
echo "dir $dir"
for d; do
  f="$dir/$d.lock"
  : >>"$f" || exit 1
  flock -n -E 75 "$f" true || printf 'busy %s %s\n' "$d" "$(head -n 1 "$f" 2>/dev/null)"
done
exit 0
"""

# $1...: target paths. One line each: "- " when missing, "E <words>" when it cannot be looked at,
# else "<mode hex> <major hex> <minor hex> <dev> <inode> <sectors or ->".
STATES_SCRIPT = r"""
for p; do
  if ! s=$(stat -L -c '%f %t %T %d %i' -- "$p" 2>&1); then
    case "$s" in *"No such file"*) echo "-";; *) echo "E ${s##*: }";; esac
    continue
  fi
  set -- $s "$@"
  n=-
  case "$1" in 6???) n=$(cat "/sys/dev/block/$(printf '%d:%d' "0x$2" "0x$3")/size" 2>/dev/null || echo 0);; esac
  echo "$1 $2 $3 $4 $5 $n"
  shift 5
done
"""


# $1...: new file targets. Each is made empty under a temporary name beside it (mktemp: O_EXCL) and
# hard-linked to its name: link(2) fails on any name that exists, a link included, and follows none.
# On failure the path is printed and the script stops.
MAKE_FILES_SCRIPT = r"""
for p; do
  t=$(mktemp -- "$p.XXXXXX") || { echo "$p"; exit 1; }
  chmod 644 -- "$t"; ln -T -- "$t" "$p"; r=$?; rm -f -- "$t"
  [ "$r" -eq 0 ] || { echo "$p"; exit 2; }
done
"""


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
    def lock(self, disks: Sequence[str]) -> Iterator[object]:
        """Each disk's lock on the host (``flock``, as a run on the host itself takes them), held by an SSH session.

        Raises
        ------
        SafetyError
            When another run holds one, naming the host, the disk and the holder.
        """
        names = sorted(set(disks))
        if not names:
            yield ()
            return
        done = self.node.run(["sh", "-c", LOCK_FOLDER_SCRIPT, "sh", *names])
        lines = done.stdout.splitlines()
        folder = next((line[4:] for line in lines if line.startswith("dir ")), None)
        said = next((line[6:] for line in lines if line.startswith("error ")), "")
        busy = [line.split(" ", 2) for line in lines if line.startswith("busy ")]
        if busy:
            raise SafetyError(
                "; ".join(
                    f"{self.label}another iobench run ({_holder(b[2] if len(b) > 2 else '')}) is using {b[1]}; "
                    "wait for it or stop it"
                    for b in busy
                )
            )
        if done.returncode != 0 or folder is None:
            raise SafetyError(
                f"{self.label}cannot lock its disks: {said or done.stderr.strip() or 'no answer'}"
            )
        files = [f"{folder}/{name}.lock" for name in names]
        session = self.node.stream(["sh", "-c", LOCK_SCRIPT, LOCK_SCRIPT, "", *files], stdin=True)
        try:
            line = first_line(session, LOCK_TIMEOUT_S)
            if line != "locked":
                session.wait(timeout=5) if session.poll() is None else None
                code = session.returncode
                raise SafetyError(
                    f"{self.label}another iobench run took a lock of {', '.join(names)} just now"
                    if code == 75
                    else f"{self.label}cannot lock its disks (flock exited {code})"
                )
            yield tuple(names)
        finally:
            end_session(session, 10)

    def tuner(self, run_dir: str) -> DeviceTuner:
        """A tuner of the host's sysfs, journalled here under the host's record."""
        return DeviceTuner(run_dir=run_dir, system=self.system, host=self.journal_host)

    def states(self, paths: Sequence[str]) -> dict[str, TargetState]:
        """One remote command for all the paths."""
        done = self.node.run(["sh", "-c", STATES_SCRIPT, "sh", *paths])
        lines = done.stdout.splitlines()
        found = {}
        for path, line in zip(paths, lines + [""] * (len(paths) - len(lines)), strict=True):
            found[path] = _remote_state(line)
        return found

    def edge(self, paths: Sequence[str], disks: Sequence[str], watch: Watch | None) -> PointEdge:
        """The host's agent answers (:meth:`~iobench.system.hostmonitor.HostMonitor.edge`): no new command.

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
            scheduler, readahead = seen.schedulers.get(disk, ""), seen.readahead_kb.get(disk, "")
            if scheduler and readahead.isdigit():
                settings[disk] = {
                    "scheduler": parse_scheduler(scheduler)[0] or "",
                    "readahead_kb": int(readahead),
                }
        states = {path: _remote_state(seen.targets.get(path, "")) for path in paths}
        return PointEdge(states, settings, seen.sample if watch is not None else None)

    def start_monitor(self, watch: Watch | None, interval: float) -> None:
        """Start the host's agent for the whole run (:class:`~iobench.system.hostmonitor.HostMonitor`)."""
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
        self.node.run(["sync"], timeout=600)
        self.system.write_attribute("/proc/sys/vm/drop_caches", "3")

    def make_files(self, paths: Sequence[str]) -> None:
        """Each made under a temporary name, then hard-linked to its name (``link`` never follows or replaces one), and remembered."""
        if not paths:
            return
        done = self.node.run(["sh", "-c", MAKE_FILES_SCRIPT, "sh", *paths])
        if done.returncode != 0:
            path = done.stdout.strip() or paths[0]
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


def _remote_state(line: str) -> TargetState:
    if line == "-":
        return TargetState(exists=False)
    if line.startswith("E "):
        return TargetState(exists=True, error=line[2:].strip())
    words = line.split()
    try:
        mode, major, minor, dev, ino = (
            int(words[0], 16),
            int(words[1], 16),
            int(words[2], 16),
            int(words[3]),
            int(words[4]),
        )
    except (ValueError, IndexError):
        return TargetState(exists=True, error=f"unreadable answer {line!r}")
    if stat.S_ISBLK(mode):
        sectors = int(words[5]) if len(words) > 5 and words[5].isdigit() else None
        return TargetState(True, True, (os.makedev(major, minor),), sectors)
    return TargetState(True, False, (dev, ino))


def site_disks(site: Site, paths: Sequence[str] | None = None) -> list[str]:
    """The disks under a site's targets (``paths``, default all), sorted."""
    locations = site.facts.locations
    wanted = locations if paths is None else {p: locations[p] for p in paths}
    return sorted({disk for location in wanted.values() for disk in location.disks})


__all__ = ["HostSite", "LocalSite", "PointEdge", "Site", "TargetState", "site_disks"]
