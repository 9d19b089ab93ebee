"""Another host's sysfs and procfs, read and written over a :class:`~iobench.system.ssh.Transport`.

Two ways, each for what it is good at:

- :func:`fetch_snapshot` copies the sysfs and procfs files iobench's topology,
  guard and ``system show`` read (and nothing else) into a folder here, in one
  remote call.
  The folder is a snapshot root: :class:`~iobench.system.hostfs.SystemRoot`
  and :func:`~iobench.system.topology.discover_topology` read it with the same
  code as any other snapshot (``--fsroot``).
- :class:`RemoteRoot` is a live :class:`~iobench.system.hostfs.SystemRoot` of
  the host: every read, write and lookup is a remote command. Device settings
  (:mod:`iobench.system.tuning`) go through it, so what is journalled and
  restored is what the host has now.

:func:`proc_table` lists the host's processes (pid, parent, allowed CPUs and
memory nodes, name) for placement checks and for finding fio servers.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from iobench.errors import IobenchError
from iobench.system.hostfs import SystemFileError, SystemRoot, natural_key
from iobench.system.process import Completed
from iobench.system.ssh import COMMAND_TIMEOUT_S, Ssh, SshTarget, Transport, control_dir

__all__ = [
    "ProcEntry",
    "RemoteRoot",
    "RemoteStat",
    "Snapshot",
    "fetch_snapshot",
    "proc_table",
    "remote_root",
]

SNAPSHOT_TIMEOUT_S = 120.0

# $1: the record delimiter; $2...: target paths. (sh functions share their variables: x and v are
# theirs.) Prints, for the topology and for `iobench system show`, every file it reads (F: path,
# then the text), every symlink (L: path and target) and folder (D); for each target the nearest
# existing path, its realpath and its stat (T); then the stat of / and /dev (R). `o` reads one-line
# files with the shell's own `read`: the settings' files are a few per CPU and one per process, and
# a `cat` each would start thousands of processes on a large host. Not /proc/sys: the shell reads a
# byte at a time, and a sysctl answers a read past its start with nothing ("60" reads as "6").
SNAPSHOT_SCRIPT = r"""
d=$1; shift
f() { for x; do [ -f "$x" ] && [ -r "$x" ] || continue; printf '%s F %s\n' "$d" "$x"; cat "$x" 2>/dev/null; echo; done; }
o() { for x; do [ -f "$x" ] && [ -r "$x" ] || continue; v=; IFS= read -r v <"$x" 2>/dev/null; printf '%s F %s\n%s\n' "$d" "$x" "$v"; done; }
l() { for x; do [ -L "$x" ] && printf '%s L %s\n%s\n' "$d" "$x" "$(readlink "$x")"; done; return 0; }
dr() { for x; do [ -d "$x" ] && printf '%s D %s\n' "$d" "$x"; done; return 0; }
st() { stat -L -c '%f %t %T %d %i %s' -- "$1" 2>/dev/null || echo '- - - - - -'; }
c=/sys/devices/system/cpu; n=/sys/devices/system/node
dr $c $c/cpu[0-9]* $c/cpu[0-9]*/topology $n $n/node[0-9]* /sys/class/block /sys/block /sys/dev/block
f $c/online $c/cpu[0-9]*/online $c/cpu[0-9]*/topology/physical_package_id $c/cpu[0-9]*/topology/core_id
f $c/cpu[0-9]*/topology/thread_siblings_list $c/cpu[0-9]*/topology/thread_siblings
f $n/node[0-9]*/cpulist $n/node[0-9]*/cpumap $n/node[0-9]*/distance
l /sys/class/block/* /sys/block/* /sys/dev/block/*
seen=' '
for b in /sys/class/block/* /sys/block/*; do
  [ -e "$b" ] || continue
  r=$(readlink -f "$b") || continue
  case "$seen" in *" $r "*) continue;; esac
  seen="$seen$r "
  dr "$r" "$r/queue" "$r/holders" "$r/slaves" "$r/device" "$r/dm"
  f "$r/dev" "$r/size" "$r/partition" "$r/queue/scheduler" "$r/queue/read_ahead_kb" "$r/queue/rotational"
  f "$r/loop/backing_file" "$r/loop/offset" "$r/loop/sizelimit"
  o "$r/queue/write_cache" "$r/queue/io_poll"
  f "$r/device/model" "$r/device/firmware_rev" "$r/device/rev" "$r/dm/name"
  l "$r"/holders/* "$r"/slaves/*
  p=${r%/*}
  while :; do
    case "$p" in /sys/devices/*) ;; *) break;; esac
    case "$seen" in *" $p "*) break;; esac
    seen="$seen$p "
    f "$p/numa_node" "$p/local_cpulist" "$p/local_cpus" "$p/class" "$p/irq"
    f "$p/current_link_speed" "$p/max_link_speed" "$p/current_link_width" "$p/max_link_width"
    dr "$p/msi_irqs"; f "$p"/msi_irqs/*; l "$p/subsystem"
    p=${p%/*}
  done
done
f /proc/self/mountinfo /proc/swaps /proc/cpuinfo
f /proc/sys/kernel/hostname /proc/sys/kernel/osrelease /proc/sys/kernel/random/boot_id
o $c/cpu[0-9]*/cpufreq/scaling_governor $c/cpu[0-9]*/cpufreq/scaling_available_governors
o $c/cpufreq/boost $c/intel_pstate/no_turbo $c/smt/control $c/smt/active
o $c/cpu[0-9]*/cpuidle/state[0-9]*/latency $c/cpu[0-9]*/cpuidle/state[0-9]*/name $c/cpu[0-9]*/cpuidle/state[0-9]*/disable
o /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag
o /sys/module/intel_idle/parameters/max_cstate /sys/module/nvme/parameters/poll_queues
f /proc/sys/vm/swappiness /proc/sys/kernel/numa_balancing /proc/sys/fs/protected_symlinks
o /proc/[0-9]*/comm
dr /sys/class/nvme /sys/class/nvme/*
for t; do
  p=$t
  while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname -- "$p"); done
  printf '%s T %s\n%s\n%s\n%s\n' "$d" "$t" "$p" "$(readlink -f -- "$t" 2>/dev/null || echo "$t")" "$(st "$p")"
done
printf '%s R\n%s\n%s\n' "$d" "$(st /)" "$(st /dev)"
"""

# $1: an awk program; every process's status file, one line each (see proc_table). `cat` goes on past
# a process that ends while the list is read, where awk (mawk) given the files would stop at it.
PROC_SCRIPT = r"""cat /proc/[0-9]*/status 2>/dev/null | awk "$1"; exit 0"""
PROC_AWK = r"""
/^Name:/ { p = ""; pp = ""; c = ""; m = ""; st = "?"; n = $0; sub(/^Name:[ \t]*/, "", n) }
/^State:/ { st = $2 }
/^Pid:/ { p = $2 }
/^PPid:/ { pp = $2 }
/^Cpus_allowed_list:/ { c = $2 }
/^Mems_allowed_list:/ { m = $2; print p, pp, c, m, st, n }
"""

# $1...: pids. "<pid> <exit code>" for each that is a zombie (its wait status, as /proc/<pid>/stat
# keeps it until the parent reaps it).
EXIT_SCRIPT = r"""
for p; do s=$(cat "/proc/$p/stat" 2>/dev/null) || continue; s=${s##*) }; set -- $s; [ "$1" = Z ] && echo "$p ${50}"; done
exit 0
"""

# $1: value, $2: file. One write(2) of the value, as SystemRoot.write_attribute does here.
WRITE_SCRIPT = r"""printf '%s' "$1" > "$2" """

# $1: path. "<mode octal>" when this user may write it, nothing otherwise.
WRITABLE_SCRIPT = r"""[ -w "$1" ] && stat -c %a -- "$1" """

# $1...: block device names. The resolved sysfs folder of each that exists, else an empty line.
BLOCK_DIR_SCRIPT = r"""
for n; do
  if [ -e "/sys/class/block/$n" ]; then readlink -f "/sys/class/block/$n"
  elif [ -e "/sys/block/$n" ]; then readlink -f "/sys/block/$n"
  else echo; fi
done
"""

_ERRNO_WORDS = {os.strerror(code): code for code in errno.errorcode if code < 200}


def _errno_of(text: str) -> int:
    """The errno whose C-library words end a remote tool's complaint (``cat: x: No such file ...``)."""
    for line in reversed(text.strip().splitlines()):
        words = line.rsplit(": ", 1)[-1].strip()
        if words in _ERRNO_WORDS:
            return _ERRNO_WORDS[words]
    return errno.EIO


@dataclass(frozen=True)
class RemoteStat:
    """``stat -L`` of a path on a host.

    Attributes
    ----------
    mode, rdev_major, rdev_minor, dev, ino, size : int
        As :func:`os.stat` gives them (``dev`` in the kernel's encoding).
    """

    mode: int
    rdev_major: int
    rdev_minor: int
    dev: int
    ino: int
    size: int

    @classmethod
    def parse(cls, line: str) -> RemoteStat | None:
        """``%f %t %T %d %i %s`` (hex mode, hex major and minor, decimal rest); None for ``- - -``."""
        parts = line.split()
        try:
            return cls(
                int(parts[0], 16),
                int(parts[1], 16),
                int(parts[2], 16),
                int(parts[3]),
                int(parts[4]),
                int(parts[5]),
            )
        except (ValueError, IndexError):
            return None

    def as_stat_result(self) -> os.stat_result:
        """The same facts as an :class:`os.stat_result` (for code written against :func:`os.stat`)."""
        fields = (self.mode, self.ino, self.dev, 1, 0, 0, self.size, 0, 0, 0)
        return os.stat_result(fields, {"st_rdev": os.makedev(self.rdev_major, self.rdev_minor)})

    @property
    def is_block(self) -> bool:
        """A block device."""
        return stat.S_ISBLK(self.mode)

    @property
    def is_dir(self) -> bool:
        """A folder."""
        return stat.S_ISDIR(self.mode)

    @property
    def devno(self) -> str:
        """``major:minor`` of the device this is (block devices) or lies on (anything else)."""
        if self.is_block:
            return f"{self.rdev_major}:{self.rdev_minor}"
        return f"{os.major(self.dev)}:{os.minor(self.dev)}"


@dataclass(frozen=True)
class TargetStat:
    """A target path as the host sees it.

    Attributes
    ----------
    path : str
        The target.
    existing : str
        The path itself when it exists, else its nearest existing parent.
    realpath : str
        ``readlink -f`` of the target (symlinks such as ``/dev/disk/by-id/...`` resolved).
    stat : RemoteStat or None
        ``stat -L`` of ``existing``.
    """

    path: str
    existing: str
    realpath: str
    stat: RemoteStat | None

    @property
    def exists(self) -> bool:
        """Whether the target itself exists."""
        return self.existing == self.path and self.stat is not None


@dataclass(frozen=True)
class Snapshot:
    """What :func:`fetch_snapshot` brought back.

    Attributes
    ----------
    root : Path
        A folder here with the host's ``sys/`` and ``proc/`` files (a snapshot root).
    targets : dict of str to TargetStat
        Each target path asked for.
    root_stat, dev_stat : RemoteStat or None
        ``stat -L`` of the host's ``/`` and ``/dev``.
    """

    root: Path
    targets: dict[str, TargetStat]
    root_stat: RemoteStat | None
    dev_stat: RemoteStat | None

    @property
    def system(self) -> SystemRoot:
        """The snapshot as a :class:`~iobench.system.hostfs.SystemRoot`."""
        return SystemRoot(self.root)

    def text(self, path: str) -> str | None:
        """A copied file's text (``proc/sys/kernel/hostname``), or None."""
        return self.system.read_text(path)

    def stat(self, path: str) -> os.stat_result:
        """``os.stat`` of a target (or one of its parents up to the first existing one), as the host saw it.

        Raises
        ------
        FileNotFoundError
            For any other path, or one that does not exist on the host.
        """
        if path == "/dev" and self.dev_stat is not None:
            return self.dev_stat.as_stat_result()
        for target in self.targets.values():
            if path == target.existing and target.stat is not None:
                return target.stat.as_stat_result()
        # Between a target and its nearest existing parent everything is missing.
        raise FileNotFoundError(errno.ENOENT, "No such file or directory (or not looked up)", path)


class SnapshotError(IobenchError):
    """The host's sysfs and procfs could not be copied."""


def _inside(root: Path, relative: str) -> Path | None:
    """``root/relative`` when ``relative`` is a plain absolute sysfs or procfs path, else None."""
    parts = Path(relative).parts
    if len(parts) < 2 or parts[0] != "/" or parts[1] not in ("sys", "proc") or ".." in parts:
        return None
    return root.joinpath(*parts[1:])


def _link_stays_inside(root: Path, link: Path, target: str) -> bool:
    if target.startswith("/") or not target:
        return False
    resolved = os.path.normpath(link.parent / target)
    return resolved == str(root) or resolved.startswith(str(root) + os.sep)


def snapshot_records(output: str, delimiter: str) -> list[tuple[str, str, list[str]]]:
    """(kind, first field, following lines) per record of the snapshot script's output."""
    records: list[tuple[str, str, list[str]]] = []
    mark = delimiter + " "
    for line in output.split("\n"):
        if line.startswith(mark):
            kind, _, rest = line[len(mark) :].partition(" ")
            records.append((kind, rest, []))
        elif records:
            records[-1][2].append(line)
    return records


def write_snapshot_tree(root: Path, records: list[tuple[str, str, list[str]]]) -> None:
    """Folders, then files, then symlinks: a link made last can never redirect a file written here.

    A link is kept only when it resolves inside ``root`` once every link is
    made: how its target reads says nothing when a component of it is
    itself a link (``a -> b/../..`` with ``b -> .``).
    """
    for kind, path, _ in records:
        where = _inside(root, path) if kind == "D" else None
        if where is not None:
            where.mkdir(parents=True, exist_ok=True)
    # No link exists yet: a folder found inside once stays inside while the files are written.
    inside: dict[Path, bool] = {}
    for kind, path, lines in records:
        where = _inside(root, path) if kind == "F" else None
        if where is None:
            continue
        parent = where.parent
        if parent not in inside:
            parent.mkdir(parents=True, exist_ok=True)
            inside[parent] = Path(os.path.realpath(parent)).is_relative_to(root)
        if not inside[parent]:
            continue
        where.write_text("\n".join(lines[:-1] if lines and lines[-1] == "" else lines))
    made = []
    for kind, path, lines in records:
        where = _inside(root, path) if kind == "L" else None
        target = lines[0] if lines else ""
        if where is None or not _link_stays_inside(root, where, target):
            continue
        where.parent.mkdir(parents=True, exist_ok=True)
        if not os.path.lexists(where) and Path(os.path.realpath(where.parent)).is_relative_to(root):
            where.symlink_to(target)
            made.append(where)
    # Removing a link can change where another resolves: look again until none escapes.
    escaping = made
    while escaping:
        escaping = [link for link in made if not Path(os.path.realpath(link)).is_relative_to(root)]
        for link in escaping:
            link.unlink()
            made.remove(link)


def fetch_snapshot(transport: Transport, dest: Path, targets: Iterable[str] = ()) -> Snapshot:
    """Copy the host's topology files into ``dest`` and look up ``targets`` there.

    One remote command (a constant script, :data:`SNAPSHOT_SCRIPT`) prints
    every file, folder and symlink :func:`~iobench.system.topology.discover_topology`,
    :func:`~iobench.system.topology.locate_target` and the write guard read:
    CPUs, nodes, block devices with the folders above them up to
    ``/sys/devices``, ``mountinfo``, ``swaps``, ``cpuinfo``, the hostname,
    kernel release and boot id; and every file :func:`iobench.system.stability.show`
    reads (governors, idle states, THP, NVMe polling, write caches, NUMA
    balancing, each process's name), so a host's settings cost no remote
    command more. Paths outside ``/sys`` and ``/proc``, and symlinks that
    would point out of ``dest``, are not written.

    Parameters
    ----------
    transport
        The host.
    dest
        An empty folder here; becomes the snapshot root.
    targets
        Paths on the host to stat (the matrix's targets there).

    Raises
    ------
    SnapshotError
        When the script fails or prints nothing usable.
    """
    wanted = list(dict.fromkeys(targets))
    delimiter = f"@@iobench-{secrets.token_hex(8)}@@"
    done = transport.run(["sh", "-c", SNAPSHOT_SCRIPT, "sh", delimiter, *wanted], timeout=SNAPSHOT_TIMEOUT_S)
    records = snapshot_records(done.stdout, delimiter)
    if done.returncode != 0 or not any(kind == "R" for kind, _, _ in records):
        said = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise SnapshotError(
            f"host {transport.target.describe()}: cannot read its sysfs and procfs: {said[0]}; "
            "iobench needs sh, cat, readlink and stat there"
        )
    root = Path(os.path.realpath(dest))
    write_snapshot_tree(root, records)
    found: dict[str, TargetStat] = {}
    root_stat = dev_stat = None
    for kind, first, lines in records:
        if kind == "T" and len(lines) >= 3:
            found[first] = TargetStat(first, lines[0], lines[1] or first, RemoteStat.parse(lines[2]))
        elif kind == "R" and len(lines) >= 2:
            root_stat, dev_stat = RemoteStat.parse(lines[0]), RemoteStat.parse(lines[1])
    return Snapshot(root, found, root_stat, dev_stat)


# --- processes ---------------------------------------------------------------


@dataclass(frozen=True)
class ProcEntry:
    """One process of a host, from its ``/proc/<pid>/status``."""

    pid: int
    ppid: int
    cpus: str
    mems: str
    name: str
    state: str = "?"
    """The kernel's one-letter state (``R``, ``S``, ``Z`` for a zombie not yet reaped, ...)."""


def parse_proc_line(line: str) -> ProcEntry | None:
    """One line of :data:`PROC_AWK`'s output, or None for anything else."""
    parts = line.rstrip("\n").split(" ", 5)
    if len(parts) == 6 and parts[0].isdigit() and parts[1].isdigit():
        return ProcEntry(int(parts[0]), int(parts[1]), parts[2], parts[3], parts[5], parts[4])
    return None


def proc_table(transport: Transport, *, timeout: float = COMMAND_TIMEOUT_S) -> dict[int, ProcEntry]:
    """Every process of the host, by pid: parent, ``Cpus_allowed_list``, ``Mems_allowed_list``, name.

    One remote command (awk over ``/proc/[0-9]*/status``); a process that ends
    while it is read is left out.
    """
    done = transport.run(["sh", "-c", PROC_SCRIPT, "sh", PROC_AWK], timeout=timeout)
    entries = (parse_proc_line(line) for line in done.stdout.splitlines())
    return {entry.pid: entry for entry in entries if entry is not None}


def descendants_in(table: dict[int, ProcEntry], root: int) -> dict[int, int]:
    """Every process below ``root`` in ``table``, with its depth (children 1, grandchildren 2, ...)."""
    children: dict[int, list[int]] = {}
    for entry in table.values():
        children.setdefault(entry.ppid, []).append(entry.pid)
    found: dict[int, int] = {}
    todo = [(child, 1) for child in children.get(root, [])]
    while todo:
        pid, depth = todo.pop()
        if pid in found:
            continue
        found[pid] = depth
        todo.extend((child, depth + 1) for child in children.get(pid, []))
    return found


# --- a live SystemRoot over the transport ----------------------------------------------


class RemoteRoot(SystemRoot):
    """The host's own sysfs and procfs, live: every read and write is a remote command.

    Paths are the host's (``/sys/block/sda/queue/scheduler``); relative ones
    are taken from ``/`` as for :class:`~iobench.system.hostfs.SystemRoot`.
    With a ``snapshot`` (from :func:`fetch_snapshot`), what does not change
    while a run lasts (which folders and links exist) is looked up there
    instead of on the host: a remote command costs a round trip.

    Parameters
    ----------
    transport
        The host.
    snapshot
        The snapshot root of the same host, or None.
    """

    def __init__(self, transport: Transport, snapshot: str | os.PathLike[str] | None = None) -> None:
        super().__init__("/")
        self.transport = transport
        self.snapshot = None if snapshot is None else SystemRoot(snapshot)

    def __repr__(self) -> str:
        return f"RemoteRoot({self.transport.target.describe()!r})"

    @property
    def live(self) -> bool:
        """Not this machine's: its ``/dev`` nodes are not here."""
        return False

    def _run(self, argv: Sequence[str]) -> Completed:
        return self.transport.run(argv)

    def _copy(self, path: str | os.PathLike[str]) -> Path | None:
        """Where the snapshot holds the host's ``path``; None without a snapshot."""
        if self.snapshot is None:
            return None
        return self.snapshot.fsroot / os.fspath(self.path(path)).lstrip("/")

    def _original(self, copy: Path) -> Path:
        """The host's path of a path inside the snapshot."""
        assert self.snapshot is not None
        return Path("/") / os.path.relpath(copy, os.path.realpath(self.snapshot.fsroot))

    def read_required(self, path: str | os.PathLike[str]) -> str:
        """The file's text on the host (see :meth:`SystemRoot.read_required`)."""
        host = self.path(path)
        done = self._run(["cat", "--", os.fspath(host)])
        if done.returncode != 0:
            raise SystemFileError("read", f"{self.transport.target.name}:{host}", _os_error(done))
        return done.stdout.replace("\x00", "").strip()

    def write_attribute(self, path: str | os.PathLike[str], text: str) -> None:
        """One ``write(2)`` of ``text`` to the file on the host."""
        host = self.path(path)
        done = self._run(["sh", "-c", WRITE_SCRIPT, "sh", text, os.fspath(host)])
        if done.returncode != 0:
            raise SystemFileError("write", f"{self.transport.target.name}:{host}", _os_error(done))

    def writable(self, path: str | os.PathLike[str]) -> bool:
        """Whether this user may write the attribute on the host (mode bits and ``access``)."""
        done = self._run(["sh", "-c", WRITABLE_SCRIPT, "sh", os.fspath(self.path(path))])
        mode = done.stdout.strip()
        return done.returncode == 0 and mode.isdigit() and int(mode, 8) & 0o222 != 0

    def exists(self, path: str | os.PathLike[str]) -> bool:
        """Whether the path exists on the host."""
        copy = self._copy(path)
        if copy is not None:
            return os.path.exists(copy)
        return self._run(["test", "-e", os.fspath(self.path(path))]).returncode == 0

    def is_dir(self, path: str | os.PathLike[str]) -> bool:
        """Whether the path is a folder on the host."""
        copy = self._copy(path)
        if copy is not None:
            return os.path.isdir(copy)  # noqa: PTH112 - False, never an exception
        return self._run(["test", "-d", os.fspath(self.path(path))]).returncode == 0

    def realpath(self, path: str | os.PathLike[str]) -> Path:
        """The path with its symlinks resolved on the host."""
        copy = self._copy(path)
        if copy is not None:
            return self._original(Path(os.path.realpath(copy)))
        host = os.fspath(self.path(path))
        done = self._run(["readlink", "-f", "--", host])
        return Path(done.stdout.strip() or host)

    def list_dir(self, path: str | os.PathLike[str]) -> tuple[str, ...]:
        """Names in a folder of the host, in natural order; empty when it cannot be listed."""
        copy = self._copy(path)
        if copy is not None and self.snapshot is not None:
            return self.snapshot.list_dir(copy)
        done = self._run(["ls", "-1A", "--", os.fspath(self.path(path))])
        if done.returncode != 0:
            return ()
        return tuple(sorted((n for n in done.stdout.splitlines() if n), key=natural_key))

    def block_dir(self, name: str) -> Path | None:
        """The host's sysfs folder of a block device (``class/block``, then ``block``)."""
        if not name or "/" in name or name in (".", ".."):
            return None
        if self.snapshot is not None:
            found = self.snapshot.block_dir(name)
            return None if found is None else self._original(found)
        done = self._run(["sh", "-c", BLOCK_DIR_SCRIPT, "sh", name])
        text = done.stdout.strip()
        return Path(text) if text else None


def _os_error(done: Completed) -> OSError:
    code = _errno_of(done.stderr)
    return OSError(code, os.strerror(code))


@contextlib.contextmanager
def remote_root(host: Mapping[str, object]) -> Iterator[RemoteRoot]:
    """A live :class:`RemoteRoot` of a host named by its record (a journal's ``host``), for one task.

    Opens a control connection for the block and closes it after.

    Raises
    ------
    HostUnreachable
        When the host cannot be reached.
    """
    folder = control_dir()
    ssh = Ssh(SshTarget.from_json(dict(host)), folder / "restore.sock")
    try:
        ssh.open()
        yield RemoteRoot(ssh)
    finally:
        ssh.close()
        shutil.rmtree(folder, ignore_errors=True)
