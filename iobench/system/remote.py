"""Another host's sysfs and procfs, read and written through its agent (:mod:`iobench.system.hostagent`).

Two ways, each for what it is good at:

- :func:`fetch_snapshot` copies the sysfs and procfs files iobench's topology,
  guard and ``system show`` read (and nothing else) into a folder here, in one
  request.
  The folder is a snapshot root: :class:`~iobench.system.hostfs.SystemRoot`
  and :func:`~iobench.system.topology.discover_topology` read it with the same
  code as any other snapshot (``--fsroot``).
- :class:`RemoteRoot` is a live :class:`~iobench.system.hostfs.SystemRoot` of
  the host: every read, write and lookup is a request to its agent. Device settings
  (:mod:`iobench.system.tuning`) go through it, so what is journalled and
  restored is what the host has now.

:func:`proc_table` lists the host's processes (pid, parent, allowed CPUs and
memory nodes, name) for placement checks and for finding fio servers.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iobench.errors import IobenchError
from iobench.system.hostagent import AgentCaller, HostAgent
from iobench.system.hostfs import SystemFileError, SystemRoot, natural_key
from iobench.system.ssh import COMMAND_TIMEOUT_S, Ssh, SshTarget, control_dir

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


@dataclass(frozen=True)
class RemoteStat:
    """``stat`` of a path on a host (symlinks followed).

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
    def parse(cls, fields: object) -> RemoteStat | None:
        """The agent's ``[mode, rdev major, rdev minor, dev, inode, size]``; None for anything else."""
        if not isinstance(fields, list) or len(fields) != 6 or not all(type(f) is int for f in fields):
            return None
        return cls(*fields)

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


def _records(answer: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """The agent's snapshot as (kind, path, lines) records: ``D`` folders, ``F`` files, ``L`` links."""
    files, links, dirs = answer.get("files"), answer.get("links"), answer.get("dirs")
    if not isinstance(files, dict) or not isinstance(links, dict) or not isinstance(dirs, list):
        raise ValueError("not a snapshot")
    records: list[tuple[str, str, list[str]]] = [("D", str(path), []) for path in dirs]
    records += [("F", str(path), [*str(text).split("\n"), ""]) for path, text in files.items()]
    records += [("L", str(path), [str(target)]) for path, target in links.items()]
    return records


def fetch_snapshot(agent: AgentCaller, dest: Path, targets: Iterable[str] = ()) -> Snapshot:
    """Copy the host's topology files into ``dest`` and look up ``targets`` there.

    One request to the host's agent (:func:`iobench.agent.probe.snapshot`)
    brings every file, folder and symlink :func:`~iobench.system.topology.discover_topology`,
    :func:`~iobench.system.topology.locate_target`, the write guard and
    :func:`iobench.system.stability.show` read, so a host's settings cost no
    request more. Paths outside ``/sys`` and ``/proc``, and symlinks that
    would point out of ``dest``, are not written.

    Parameters
    ----------
    agent
        The host's agent.
    dest
        An empty folder here; becomes the snapshot root.
    targets
        Paths on the host to stat (the matrix's targets there).

    Raises
    ------
    SnapshotError
        When the answer is not a snapshot.
    """
    wanted = list(dict.fromkeys(targets))
    answer = agent.call("snapshot", timeout=SNAPSHOT_TIMEOUT_S, targets=wanted)
    try:
        records = _records(answer)
        looked = answer.get("targets") or {}
        found = {
            path: TargetStat(
                path,
                str(looked[path]["existing"]),
                str(looked[path]["realpath"]) or path,
                RemoteStat.parse(looked[path]["stat"]),
            )
            for path in wanted
            if isinstance(looked.get(path), dict)
        }
    except (AttributeError, KeyError, TypeError, ValueError):
        raise SnapshotError(
            f"host {agent.target.describe()}: its agent sent something that is not a snapshot"
        ) from None
    root = Path(os.path.realpath(dest))
    write_snapshot_tree(root, records)
    return Snapshot(root, found, RemoteStat.parse(answer.get("root")), RemoteStat.parse(answer.get("dev")))


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


def proc_table(agent: AgentCaller, *, timeout: float = COMMAND_TIMEOUT_S) -> dict[int, ProcEntry]:
    """Every process of the host, by pid: parent, ``Cpus_allowed_list``, ``Mems_allowed_list``, name.

    One request to its agent; a process that ends while it is read is left out.
    """
    found: dict[int, ProcEntry] = {}
    for row in agent.call("processes", timeout=timeout) or ():
        with contextlib.suppress(KeyError, TypeError, ValueError):
            entry = ProcEntry(
                int(row["pid"]),
                int(row["ppid"]),
                str(row["cpus"]),
                str(row["mems"]),
                str(row["name"]),
                str(row["state"]),
            )
            found[entry.pid] = entry
    return found


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


# --- a live SystemRoot through the agent ---------------------------------------------------


class RemoteRoot(SystemRoot):
    """The host's own sysfs and procfs, live: every read and write is a request to its agent.

    Paths are the host's (``/sys/block/sda/queue/scheduler``); relative ones
    are taken from ``/`` as for :class:`~iobench.system.hostfs.SystemRoot`.
    With a ``snapshot`` (from :func:`fetch_snapshot`), what does not change
    while a run lasts (which folders and links exist) is looked up there
    instead of on the host: a request costs a round trip.

    Parameters
    ----------
    agent
        The host's agent.
    snapshot
        The snapshot root of the same host, or None.
    """

    def __init__(self, agent: AgentCaller, snapshot: str | os.PathLike[str] | None = None) -> None:
        super().__init__("/")
        self.agent = agent
        self.snapshot = None if snapshot is None else SystemRoot(snapshot)

    def __repr__(self) -> str:
        return f"RemoteRoot({self.agent.target.describe()!r})"

    @property
    def live(self) -> bool:
        """Not this machine's: its ``/dev`` nodes are not here."""
        return False

    def _copy(self, path: str | os.PathLike[str]) -> Path | None:
        """Where the snapshot holds the host's ``path``; None without a snapshot."""
        if self.snapshot is None:
            return None
        return self.snapshot.fsroot / os.fspath(self.path(path)).lstrip("/")

    def _original(self, copy: Path) -> Path:
        """The host's path of a path inside the snapshot."""
        assert self.snapshot is not None
        return Path("/") / os.path.relpath(copy, os.path.realpath(self.snapshot.fsroot))

    def _ask(self, op: str, path: str | os.PathLike[str], **args: Any) -> Any:
        return self.agent.call(op, path=os.fspath(self.path(path)), **args)

    def _failed(self, action: str, path: str | os.PathLike[str], answer: Any) -> SystemFileError | None:
        code = answer.get("errno") if isinstance(answer, dict) else errno.EIO
        if code is None:
            return None
        code = code if isinstance(code, int) else errno.EIO
        where = f"{self.agent.target.name}:{self.path(path)}"
        return SystemFileError(action, where, OSError(code, os.strerror(code)))

    def read_required(self, path: str | os.PathLike[str]) -> str:
        """The file's text on the host (see :meth:`SystemRoot.read_required`)."""
        answer = self._ask("read", path)
        failed = self._failed("read", path, answer)
        if failed is not None:
            raise failed
        return str(answer.get("text", "")).replace("\x00", "").strip()

    def write_attribute(self, path: str | os.PathLike[str], text: str) -> None:
        """One ``write(2)`` of ``text`` to the file on the host."""
        failed = self._failed("write", path, self._ask("write", path, text=text))
        if failed is not None:
            raise failed

    def writable(self, path: str | os.PathLike[str]) -> bool:
        """Whether this user may write the attribute on the host (mode bits and ``access``)."""
        return self._ask("writable", path) is True

    def exists(self, path: str | os.PathLike[str]) -> bool:
        """Whether the path exists on the host."""
        copy = self._copy(path)
        if copy is not None:
            return os.path.exists(copy)
        return self._ask("exists", path) is True

    def is_dir(self, path: str | os.PathLike[str]) -> bool:
        """Whether the path is a folder on the host."""
        copy = self._copy(path)
        if copy is not None:
            return os.path.isdir(copy)  # noqa: PTH112 - False, never an exception
        return self._ask("is_dir", path) is True

    def realpath(self, path: str | os.PathLike[str]) -> Path:
        """The path with its symlinks resolved on the host."""
        copy = self._copy(path)
        if copy is not None:
            return self._original(Path(os.path.realpath(copy)))
        found = self._ask("realpath", path)
        return Path(found if isinstance(found, str) and found else self.path(path))

    def list_dir(self, path: str | os.PathLike[str]) -> tuple[str, ...]:
        """Names in a folder of the host, in natural order; empty when it cannot be listed."""
        copy = self._copy(path)
        if copy is not None and self.snapshot is not None:
            return self.snapshot.list_dir(copy)
        names = self._ask("list_dir", path)
        if not isinstance(names, list):
            return ()
        return tuple(sorted((str(n) for n in names if n), key=natural_key))

    def block_dir(self, name: str) -> Path | None:
        """The host's sysfs folder of a block device (``class/block``, then ``block``)."""
        if not name or "/" in name or name in (".", ".."):
            return None
        if self.snapshot is not None:
            found = self.snapshot.block_dir(name)
            return None if found is None else self._original(found)
        for folder in ("/sys/class/block", "/sys/block"):
            if self.agent.call("exists", path=f"{folder}/{name}") is True:
                return self.realpath(f"{folder}/{name}")
        return None


@contextlib.contextmanager
def remote_root(host: Mapping[str, object]) -> Iterator[RemoteRoot]:
    """A live :class:`RemoteRoot` of a host named by its record (a journal's ``host``), for one task.

    Opens a control connection and the host's agent for the block and closes both after.

    Raises
    ------
    HostUnreachable
        When the host cannot be reached (or cannot run the agent).
    """
    folder = control_dir()
    ssh = Ssh(SshTarget.from_json(dict(host)), folder / "restore.sock")
    agent = HostAgent(ssh)
    try:
        ssh.open()
        yield RemoteRoot(agent.start())
    finally:
        agent.close()
        ssh.close()
        shutil.rmtree(folder, ignore_errors=True)
