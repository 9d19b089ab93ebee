"""iobench's own files: where they live, who else could change them, and how they are written.

Every file iobench writes (run records, frames, figures, journals, caches)
reaches its final name through :func:`atomic_replacing`: temp file beside it,
fsync, rename, fsync the folder. State that decides what iobench does later
(locks, journals) lives only in a folder :func:`private_dir` vouches for. This
module imports only the standard library and :mod:`iobench.errors`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from iobench.errors import SafetyError

PathArg = str | os.PathLike[str]


def state_dir() -> Path:
    """Where iobench keeps state between runs: ``$XDG_STATE_HOME/iobench``.

    Returns
    -------
    Path
        ``~/.local/state/iobench`` when ``XDG_STATE_HOME`` is unset or empty;
        not created or checked here (:func:`private_dir` does both).
    """
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "iobench"


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _folder_problem(place: Path, info: os.stat_result, me: int) -> str | None:
    """Why others could change what is in the folder ``place`` (``info``: its stat); sticky folders are safe."""
    if info.st_uid in (me, 0) and not (info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX):
        return None
    return f"folder {place} belongs to {_owner(info.st_uid)}, mode {stat.S_IMODE(info.st_mode):04o}"


def others_can_change(path: PathArg, *, own: bool = True) -> str | None:
    """Who besides this user and root could change ``path``, or the folders that lead to it; None: no one.

    Each folder from ``/`` down to the file (every link followed) must belong
    to root or this user and be writable by no one else, unless it is sticky
    (``/tmp``: others cannot rename or remove what is not theirs there).
    ``path`` itself must belong to this user (``own``), or to this user or
    root, and be writable by no one else. A link on the way as ``path`` spells
    it must belong to root or this user and sit in such a folder, or someone
    could point it elsewhere later.

    Returns
    -------
    str or None
        ``folder /home/alice belongs to alice (uid 1000), mode 0755``: the
        first place someone else could change, or why it cannot be looked at.
    """
    me = os.geteuid()
    given, real = Path(os.path.abspath(path)), Path(os.path.realpath(path))
    try:
        for place in [given, *given.parents]:
            if place.is_symlink():
                link = os.lstat(place)
                if link.st_uid not in (me, 0):
                    return f"link {place} belongs to {_owner(link.st_uid)}"
                problem = _folder_problem(place.parent, os.stat(place.parent), me)
                if problem:
                    return problem
        for place in reversed(real.parents):
            problem = _folder_problem(place, os.lstat(place), me)
            if problem:
                return problem
        info = os.lstat(real)
    except OSError as exc:
        return f"{exc.filename} cannot be looked at ({exc.strerror})"
    if info.st_uid not in ((me,) if own else (me, 0)) or info.st_mode & 0o022:
        kind = "folder" if stat.S_ISDIR(info.st_mode) else "file"
        return f"{kind} {real} belongs to {_owner(info.st_uid)}, mode {stat.S_IMODE(info.st_mode):04o}"
    return None


def private_dir(path: PathArg) -> Path:
    """``path`` (made, mode 0700, with any folder missing on the way) once only this user and root can change it.

    Locks and journals decide what a later run (as root, maybe) does, so they
    live only where no other user could have planted or swapped anything:
    with ``sudo -E``, ``XDG_STATE_HOME`` is still another user's folder.

    Returns
    -------
    Path
        The folder with every link resolved: the one that was checked.

    Raises
    ------
    SafetyError
        Naming the folder, its owner and mode, and what to do; or when it
        cannot be made.
    """
    folder = Path(os.path.abspath(path))
    missing = [f for f in (folder, *folder.parents) if not os.path.lexists(f)]
    # Nothing is made inside a folder someone else could change (another user's home, say).
    existing = folder.parents[len(missing) - 1] if missing else folder
    problem = others_can_change(existing, own=not missing)
    if not problem:
        try:
            # Each folder made is this user's alone (mkdir's parents would get the umask's mode).
            for made in reversed(missing):
                made.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise SafetyError(f"cannot make iobench's state folder {folder}: {exc.strerror}") from None
        problem = others_can_change(folder)
    if problem:
        raise SafetyError(
            f"iobench's state folder {folder} is refused: {problem}, and this run is "
            f"{_owner(os.geteuid())}'s; iobench keeps locks and journals only where no other user can "
            "change them (`sudo -E` keeps another user's XDG_STATE_HOME): set XDG_STATE_HOME to a "
            "folder of this user's that only they can write"
        )
    return Path(os.path.realpath(folder))


def fsync_directory(directory: PathArg) -> None:
    """Make a rename or unlink in ``directory`` durable.

    File systems that cannot sync a directory answer EINVAL; nothing more can
    be done there, so that is not an error.

    Raises
    ------
    OSError
        When the directory cannot be opened or synced.
    """
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def _temporary_beside(target: Path, mode: int) -> tuple[int, Path]:
    """A new hidden file in ``target``'s folder, keeping its suffix (tools choose formats by suffix)."""
    while True:
        tmp = target.with_name(f".{target.stem}.{secrets.token_hex(4)}.partial{target.suffix}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode), tmp
        except FileExistsError:
            continue


def _put_in_place(tmp: Path, target: Path) -> None:
    os.replace(tmp, target)
    fsync_directory(target.parent)


@contextlib.contextmanager
def atomic_replacing(final: PathArg, *, mode: int = 0o666) -> Iterator[Path]:
    """A new temporary file beside ``final`` that becomes ``final`` when the block ends.

    For writers that need a path (a parquet or figure library). The bytes are
    fsync'd before the rename and the folder after it, so after a crash
    ``final`` is either the old file or the whole new one; errors a file
    system reports late (quota, network file systems) stop the rename. On any
    failure the temporary file is removed and ``final`` is left as it was.

    Parameters
    ----------
    final : str or path-like
        The file to write; its folder must exist.
    mode : int, default 0o666
        Permissions of the new file, before the umask.

    Yields
    ------
    Path
        The temporary file (created empty, same folder and suffix as ``final``).

    Raises
    ------
    OSError
        When creating, syncing or renaming fails; the caller words it.
    """
    target = Path(final)
    fd, tmp = _temporary_beside(target, mode)
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _put_in_place(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write(path: PathArg, data: bytes | str, *, mode: int = 0o666) -> None:
    """Replace a file so that a reader or a crash sees either the old file or the whole new one.

    The data goes to a temporary file in the same folder, is fsync'd, renamed
    over ``path``, and the folder is fsync'd. On any failure the temporary
    file is removed and ``path`` is left as it was.

    Parameters
    ----------
    path : str or path-like
        The file to write; its folder must exist.
    data : bytes or str
        The new content; text is written as UTF-8.
    mode : int, default 0o666
        Permissions of the new file, before the umask (``0o600`` for private state).

    Raises
    ------
    OSError
        When writing, syncing or renaming fails; the caller words it.
    """
    payload = memoryview(data.encode() if isinstance(data, str) else data)
    with atomic_replacing(path, mode=mode) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CLOEXEC)
        try:
            while payload:
                payload = payload[os.write(fd, payload) :]
        finally:
            os.close(fd)
