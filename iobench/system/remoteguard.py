"""The write guard's questions answered by another host (:class:`RemoteMachine`).

The rules live in :mod:`iobench.system.safety`, which asks everything beyond
sysfs and procfs through a :class:`~iobench.system.safety.Machine`: device
numbers of nodes, realpaths, the device of ``/``, exclusive opens, the
libblkid tools, file facts. Here each question is answered on a host, from
its snapshot where that holds the answer, else by one remote command; so a
remote target is refused for exactly the reasons a local one is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from iobench.system.process import Completed
from iobench.system.remote import RemoteStat, Snapshot
from iobench.system.safety import FileInfo, Machine, ProbeError
from iobench.system.ssh import COMMAND_TIMEOUT_S, SshTarget
from iobench.system.surroundings import folder_refusal
from iobench.system.tuning import host_id


class GuardedHost(Protocol):
    """The host the guard asks: its agent, its name in messages, how it is reached."""

    def call(self, op: str, *, timeout: float = COMMAND_TIMEOUT_S, **args: Any) -> Any:
        """One request to the host's agent."""

    def describe(self) -> str:
        """``host a (root@storage-a)``."""

    @property
    def reached(self) -> SshTarget:
        """How the host is reached (names it in the created-files registry)."""


class RemoteMachine(Machine):
    """The write guard's questions (:class:`~iobench.system.safety.Machine`) answered by a host.

    Device numbers and realpaths of the targets come from the snapshot's
    lookups; anything else is one request to the host's agent, remembered for the run.
    """

    def __init__(self, host: GuardedHost, snapshot: Snapshot) -> None:
        self.host = host
        self.snapshot = snapshot
        self.prefix = f"{host.describe()}: "
        self._devnos: dict[str, str | None] = {}
        self._real: dict[str, str] = {}
        for looked in snapshot.targets.values():
            self._real[looked.path] = looked.realpath
            if looked.exists and looked.stat is not None and looked.stat.is_block:
                self._devnos[looked.path] = looked.stat.devno

    def devno(self, path: str) -> str | None:
        """``major:minor`` of a block device node on the host."""
        if not path.startswith("/"):
            return None
        if path not in self._devnos:
            looked = RemoteStat.parse(self.host.call("stat", path=path))
            self._devnos[path] = looked.devno if looked is not None and looked.is_block else None
        return self._devnos[path]

    def realpath(self, path: str) -> str:
        """The path with its symlinks resolved on the host."""
        if path not in self._real:
            found = self.host.call("realpath", path=path)
            self._real[path] = found if isinstance(found, str) and found else path
        return self._real[path]

    def root_devno(self) -> str | None:
        """The device number of the host's ``/``."""
        found = self.snapshot.root_stat
        return None if found is None else found.devno

    def claimed(self, node: str) -> bool:
        """Whether the host's kernel refuses an exclusive open of ``node`` (EBUSY)."""
        return self.host.call("claimed", node=node) is True

    def run_tool(self, tool: str, args: list[str], timeout: float) -> Completed:
        """A util-linux probe on the host (``/usr/sbin`` and ``/sbin`` searched too)."""
        answer = self.host.call("run", argv=[tool, *args], seconds=timeout, sbin=True, timeout=timeout + 5)
        done = Completed(
            (tool, *args),
            int(answer.get("returncode", 1)),
            str(answer.get("stdout", "")),
            str(answer.get("stderr", "")),
            0.0,
            bool(answer.get("timed_out")),
        )
        if done.returncode == 127:
            raise ProbeError(
                f"{tool} is not installed on {self.host.describe()} (apt-get install util-linux)"
            )
        if done.timed_out:
            raise ProbeError(f"{tool} did not finish within {timeout:g} s on {self.host.describe()}")
        return done

    def check_readable(self, device: str) -> None:
        """Read the device's first and last blocks on the host."""
        if self.host.call("readable", device=device) is not True:
            raise ProbeError(f"{device} cannot be read on {self.host.describe()}")

    def file_info(self, path: str) -> FileInfo:
        """A file target's facts, from the snapshot's lookup."""
        looked = self.snapshot.targets.get(path)
        parent = str(Path(path).parent)
        if looked is None or looked.stat is None:
            return FileInfo(False, False, parent, False, None)
        if looked.exists:
            return FileInfo(True, looked.stat.is_dir, parent, True, looked.stat.size)
        return FileInfo(False, False, parent, looked.existing == parent and looked.stat.is_dir, None)

    def per_process_link(self, path: str) -> str | None:
        """The ``/proc`` place each process reads as its own that ``path`` names outright, or None.

        Judged by the spelling on a host (links to such places there are not followed).
        """
        parts = Path(os.path.normpath(path)).parts
        if parts[1:2] == ("dev",) and len(parts) > 2 and parts[2] in ("fd", "stdin", "stdout", "stderr"):
            return "/" + "/".join(parts[1:3])
        if parts[1:2] == ("proc",) and len(parts) > 3 and parts[3] != "root":
            return "/" + "/".join(parts[1:4])
        return None

    def open_folder(self, path: str, protected_symlinks: bool) -> str | None:
        """The folders on the way to ``path`` on the host, judged as here (:func:`~iobench.system.safety.folder_refusal`).

        On a host the folders are those of the path its ``realpath`` resolves (the folders of
        the links on the way are not looked at), each ``lstat``'ed by its agent in one request;
        a group that may write counts as other users (its members are not asked).
        """
        parts = Path(self.realpath(path)).parts
        prefixes = [str(Path(*parts[: i + 1])) for i in range(len(parts))]
        answer = self.host.call("folders", paths=prefixes)
        me, found = answer.get("me"), answer.get("found")
        if not isinstance(me, int) or not isinstance(found, dict):
            return f"the folders on its way cannot be looked at on {self.host.describe()}"
        for folder, name in zip(prefixes, prefixes[1:], strict=False):
            entry = found.get(folder)
            if not isinstance(entry, list) or len(entry) != 3:
                return None  # missing: nothing lies beyond it, and the guard says so on its own
            uid, mode, who = int(entry[0]), int(entry[1]), str(entry[2])
            writers = "every user" if mode & 0o002 else "its group" if mode & 0o020 else None
            below = found.get(name)
            holder = (int(below[0]), str(below[2])) if isinstance(below, list) and len(below) == 3 else None
            refusal = folder_refusal(
                folder, Path(name).name, (uid, who), mode, writers, holder, me, protected_symlinks
            )
            if refusal is not None:
                return refusal
        return None

    def file_identity(self, path: str) -> str | None:
        """What tells the regular file named ``path`` on the host from any made later (its agent's
        :func:`iobench.agent.probe.file_identity`, as here), or None."""
        found = self.host.call("identity", path=path)
        return found if isinstance(found, str) and len(found) < 256 else None

    def registry_key(self, path: str) -> str:
        """``<host id>:<path>``: the same path on two hosts is two files (the id: how the host is reached)."""
        return f"{host_id(self.host.reached.to_json())}:{path}"
