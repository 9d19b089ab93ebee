"""The files iobench created: how each is told from any file made later, and the registry that remembers them.

A file iobench created may be written by later runs without ``--allow-write``.
The registry (``$XDG_STATE_HOME/iobench/created-files.json``) grants that,
so it is believed and written only where no other user can write it, and it
names each file by an identity a file made later cannot share.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from iobench.agent import probe
from iobench.errors import SafetyError
from iobench.store.atomic import atomic_write, state_dir
from iobench.system.hostfs import SystemRoot
from iobench.system.surroundings import open_folder, user_name

fd_identity, file_identity = probe.fd_identity, probe.file_identity


REGISTRY_MAX_BYTES = 16 << 20
"""The most of the registry read: more is damage, and then nothing counts as created."""


def _registry_path() -> Path:
    return state_dir() / "created-files.json"


def _registry_refusal(path: Path, protected_symlinks: bool) -> str | None:
    """Why the registry at ``path`` may not be believed or written, or None.

    It grants writes, so only this user (and root) may be able to have
    written it: the folders on its way as for a target (:func:`open_folder`),
    and the file itself this user's, a regular file no one else may write.
    """
    exposed = open_folder(str(path), protected_symlinks)
    if exposed is not None:
        return exposed
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be looked at: {exc.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        return f"{path} belongs to {user_name(info.st_uid)} (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _protected_symlinks() -> bool:
    return SystemRoot().read_text("proc/sys/fs/protected_symlinks") not in (None, "0")


def registry() -> dict[str, str]:
    """The created-files registry, when only this user can have written it (it grants writes); else empty."""
    path = _registry_path()
    if _registry_refusal(path, _protected_symlinks()) is not None:
        return {}
    try:
        with path.open("rb") as handle:
            data = json.loads(handle.read(REGISTRY_MAX_BYTES + 1)[:REGISTRY_MAX_BYTES])
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


def record(found: dict[str, str]) -> None:
    """Add ``found`` (registry key to :func:`fd_identity`) to the registry.

    Raises
    ------
    SafetyError
        When the registry lies where another user could write it (nothing recorded).
    """
    target = _registry_path()
    refusal = _registry_refusal(target, _protected_symlinks())
    if refusal is not None:
        raise SafetyError(
            f"the created-files registry {target} is not written: {refusal}; "
            "set XDG_STATE_HOME to a folder only you can write"
        )
    known = registry()
    known.update(found)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write(target, json.dumps(known, indent=1, sort_keys=True))


def create_target_file(path: str) -> tuple[int, int]:
    """Make a new file target, empty, and remember it as created by iobench; fio then opens what was made.

    ``O_CREAT | O_EXCL | O_NOFOLLOW``: a name that exists by now (a link
    someone put there, another file) is not opened, and nothing is written.

    Returns
    -------
    tuple of int
        The new file's ``st_dev`` and ``st_ino`` (what the runner holds each point to).

    Raises
    ------
    SafetyError
        When the name exists already, cannot be made, or the registry may not
        be written (then nothing is made).
    """
    target = _registry_path()
    refusal = _registry_refusal(target, _protected_symlinks())
    if refusal is not None:
        raise SafetyError(
            f"target {path} is not created: the created-files registry {target} is not trusted: {refusal}; "
            "set XDG_STATE_HOME to a folder only you can write"
        )
    try:
        fd = probe.make_file(path)
    except FileExistsError:
        raise SafetyError(
            f"target {path} appeared after the write guard judged it as a file iobench would create "
            "(made by someone else, or a link); it is not written"
        ) from None
    except OSError as exc:
        raise SafetyError(f"target {path} cannot be created: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        identity = fd_identity(fd)
    finally:
        os.close(fd)
    if identity is not None:
        record({path: identity})
    return info.st_dev, info.st_ino
