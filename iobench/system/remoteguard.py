"""The write guard's questions answered by another host (:class:`RemoteMachine`).

The rules live in :mod:`iobench.system.safety`, which asks everything beyond
sysfs and procfs through a :class:`~iobench.system.safety.Machine`: device
numbers of nodes, realpaths, the device of ``/``, exclusive opens, the
libblkid tools, file facts. Here each question is answered on a host, from
its snapshot where that holds the answer, else by one remote command; so a
remote target is refused for exactly the reasons a local one is.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from iobench.system.process import Completed
from iobench.system.remote import Snapshot
from iobench.system.safety import FileInfo, Machine, ProbeError
from iobench.system.ssh import COMMAND_TIMEOUT_S, SshTarget
from iobench.system.surroundings import folder_refusal
from iobench.system.tuning import host_id

# $1: device. Read its first and last 4 KiB, as the local guard does before probing.
READABLE_SCRIPT = r"""
size=$(blockdev --getsize64 "$1") || exit 3
dd if="$1" of=/dev/null bs=4096 count=1 2>/dev/null || exit 4
last=$(( size / 4096 - 1 )); [ "$last" -lt 0 ] && last=0
dd if="$1" of=/dev/null bs=4096 count=1 skip="$last" 2>/dev/null || exit 4
"""

# $1: device. Exit 16 (EBUSY) when the kernel refuses an exclusive open; 127 without python3.
CLAIMED_PYTHON = "import os,sys\ntry: os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))\nexcept OSError as e: sys.exit(e.errno)"

_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class GuardedHost(Protocol):
    """The host the guard asks: its commands, its name in messages, how it is reached."""

    def run(self, argv: Sequence[str], *, timeout: float = COMMAND_TIMEOUT_S) -> Completed:
        """Run argv on the host."""

    def describe(self) -> str:
        """``host a (root@storage-a)``."""

    @property
    def reached(self) -> SshTarget:
        """How the host is reached (names it in the created-files registry)."""


class RemoteMachine(Machine):
    """The write guard's questions (:class:`~iobench.system.safety.Machine`) answered by a host.

    Device numbers and realpaths of the targets come from the snapshot's
    lookups; anything else is one remote command, remembered for the run.
    The exclusive-open check needs ``python3`` on the host; without it that
    one check (a belt to the sysfs and procfs braces) is skipped.
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
            done = self.host.run(["stat", "-L", "-c", "%f %t %T", "--", path])
            words = done.stdout.split()
            found = None
            with contextlib.suppress(ValueError):
                if done.returncode == 0 and len(words) == 3 and stat.S_ISBLK(int(words[0], 16)):
                    found = f"{int(words[1], 16)}:{int(words[2], 16)}"
            self._devnos[path] = found
        return self._devnos[path]

    def realpath(self, path: str) -> str:
        """``readlink -f`` on the host."""
        if path not in self._real:
            done = self.host.run(["readlink", "-f", "--", path])
            self._real[path] = done.stdout.strip() or path
        return self._real[path]

    def root_devno(self) -> str | None:
        """The device number of the host's ``/``."""
        found = self.snapshot.root_stat
        return None if found is None else found.devno

    def claimed(self, node: str) -> bool:
        """Whether the host's kernel refuses an exclusive open of ``node`` (EBUSY)."""
        done = self.host.run(["python3", "-c", CLAIMED_PYTHON, node])
        return done.returncode == 16

    def run_tool(self, tool: str, args: list[str], timeout: float) -> Completed:
        """A util-linux probe on the host (``/usr/sbin`` and ``/sbin`` searched too)."""
        done = self.host.run(["env", _PATH, "LC_ALL=C", tool, *args], timeout=timeout + 5)
        if done.returncode == 127:
            raise ProbeError(
                f"{tool} is not installed on {self.host.describe()} (apt-get install util-linux)"
            )
        if done.timed_out:
            raise ProbeError(f"{tool} did not finish within {timeout:g} s on {self.host.describe()}")
        return done

    def check_readable(self, device: str) -> None:
        """Read the device's first and last blocks on the host."""
        done = self.host.run(["env", _PATH, "sh", "-c", READABLE_SCRIPT, "sh", device])
        if done.returncode != 0:
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

        On a host the folders are those of the path ``readlink -f`` resolves
        (the folders of the links on the way are not looked at), each
        ``lstat``'ed in one command; a group that may write counts as other
        users (its members are not asked).
        """
        parts = Path(self.realpath(path)).parts
        prefixes = [str(Path(*parts[: i + 1])) for i in range(len(parts))]
        done = self.host.run(["sh", "-c", 'id -u; stat -c "%u %a %U %n" -- "$@"', "sh", *prefixes])
        lines = done.stdout.splitlines()
        if not lines or not lines[0].isdigit():
            return f"the folders on its way cannot be looked at on {self.host.describe()}"
        me = int(lines[0])
        found: dict[str, tuple[int, int, str]] = {}
        for line in lines[1:]:
            words = line.split(" ", 3)
            with contextlib.suppress(ValueError, IndexError):
                found[words[3]] = (int(words[0]), int(words[1], 8), words[2])
        for folder, name in zip(prefixes, prefixes[1:], strict=False):
            if folder not in found:
                return None  # missing: nothing lies beyond it, and the guard says so on its own
            uid, mode, who = found[folder]
            writers = "every user" if mode & 0o002 else "its group" if mode & 0o020 else None
            entry = found.get(name)
            holder = (entry[0], entry[2]) if entry is not None else None
            refusal = folder_refusal(
                folder, Path(name).name, (uid, who), mode, writers, holder, me, protected_symlinks
            )
            if refusal is not None:
                return refusal
        return None

    def file_identity(self, path: str) -> str | None:
        """The device, inode and birth time (``stat %W``) of the regular file named ``path`` on the host (a link is not followed), or None."""
        done = self.host.run(["stat", "-c", "%F|%d|%i|%W", "--", path])
        words = done.stdout.strip().split("|")
        if done.returncode != 0 or len(words) != 4 or words[0] not in ("regular file", "regular empty file"):
            return None
        device, inode, born = words[1:]
        if not (device.isdigit() and inode.isdigit() and born.isdigit()) or born == "0":
            return None
        return f"{device}:{inode} born {born}"

    def registry_key(self, path: str) -> str:
        """``<host id>:<path>``: the same path on two hosts is two files (the id: how the host is reached)."""
        return f"{host_id(self.host.reached.to_json())}:{path}"
