"""iobench's own files: where they live and how they are written so a crash leaves no half file.

Every file iobench writes (run records, frames, figures, journals, caches)
reaches its final name through :func:`atomic_replacing`: temp file beside it,
fsync, rename, fsync the folder. This module imports only the standard library.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

PathArg = str | os.PathLike[str]


def state_dir() -> Path:
    """Where iobench keeps state between runs: ``$XDG_STATE_HOME/iobench``.

    Returns
    -------
    Path
        ``~/.local/state/iobench`` when ``XDG_STATE_HOME`` is unset or empty;
        not created here.
    """
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "iobench"


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
