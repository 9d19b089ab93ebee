"""A run directory is input: the one reader of its files, and where iobench may write beside them.

A run directory is copied, shared and handed over, so anyone may have shaped
it: a FIFO where fio's output was, a link to ``/dev/zero`` or to a file only
root can read, a table of a billion rows in a few megabytes, a document nested
thousands deep. Every read of a run directory's file goes through
:func:`read_bytes` (and the helpers built on it), which

- opens the file without following a link (``O_NOFOLLOW``), without waiting
  for a FIFO's writer (``O_NONBLOCK``) and takes it only if it is a regular
  file (``fstat``);
- takes it only when the file opened lies in the run directory, with no
  symbolic link on the way (the path the kernel opened is the path asked for);
- reads at most the cap of its :class:`Kind` and refuses a larger file;
- for tables, refuses one whose footer says more rows than :data:`MAX_ROWS`
  before reading any of them; for JSON, a document nested deeper than Python
  can follow or with an integer of more than :data:`MAX_INT_DIGITS` digits.

What it refuses is an :class:`UnreadableRunFile`: an ``OSError`` whose
``strerror`` says why, so that every caller that already reports a file it
cannot read (a damaged point, a note, NA) reports this one the same way.

Writing beside a run (the report, figures, CSV tables, the frame cache) goes
only into a directory :func:`own_directory` accepts, and every CSV cell passes
:func:`csv_safe` first.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iobench.errors import ResultsError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

MiB = 1 << 20


@dataclass(frozen=True)
class Kind:
    """A kind of file a run directory holds, and the most bytes iobench reads of one."""

    name: str
    max_bytes: int


#: ``manifest.json``, ``meta.json``, ``argv.json``: iobench's records (a few KiB each).
RECORD = Kind("record", 16 * MiB)
#: ``matrix.yaml``, and a matrix file given on the command line.
MATRIX = Kind("matrix", 1 * MiB)
#: fio's output, its job files and what it said on stderr.
FIO_TEXT = Kind("fio output", 256 * MiB)
#: fio's per-I/O or averaged logs (``*_lat.1.log``).
FIO_LOG = Kind("fio log", 1024 * MiB)
#: ``telemetry.parquet`` and ``results.parquet``.
TABLE = Kind("table", 1024 * MiB)
#: The most rows of one table read (a run's frame or a point's samples).
MAX_ROWS = 20_000_000
#: The most bytes a table's columns take once decompressed.
MAX_TABLE_BYTES = 4096 * MiB

_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnreadableRunFile(ResultsError, OSError):
    """A run directory's file that is not read: not a regular file, a link, too large, too deep.

    An ``OSError`` too, with ``strerror`` saying why: the callers that report
    a file they cannot read (``cannot read: <strerror>``) report this one the
    same way, as a damaged point or a note, never as a traceback.
    """

    def __init__(self, path: str | os.PathLike[str], why: str, code: int = errno.EINVAL) -> None:
        OSError.__init__(self, code, why, os.fspath(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"

    def __reduce__(self) -> tuple[type[UnreadableRunFile], tuple[str, str, int]]:
        # OSError's own args (errno, strerror) would not rebuild this one across processes.
        return type(self), (str(self.filename), str(self.strerror), int(self.errno or errno.EINVAL))


def _what(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _opened_path(fd: int) -> str | None:
    """Where the kernel says ``fd`` is (None when ``/proc`` cannot tell)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")  # noqa: PTH115 - pathlib's costs more than the read it checks
    except OSError:
        return None


def _below(path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> str:
    """``path`` relative to ``directory`` (a prefix as callers join them, else :func:`os.path.relpath`)."""
    text, base = os.fspath(path), os.fspath(directory).rstrip("/")
    if text.startswith(base + "/") and "/../" not in text[len(base) :] and "/./" not in text[len(base) :]:
        return text[len(base) + 1 :]
    return os.path.relpath(text, base)


def _real_directory(directory: str | os.PathLike[str]) -> tuple[str, int]:
    """``directory`` with every link resolved, by the kernel (one open, where ``realpath`` lstats each part), and its owner."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _opened_path(fd) or os.path.realpath(directory), os.fstat(fd).st_uid
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike[str], kind: Kind, within: str | os.PathLike[str] | None) -> int:
    """An open descriptor of ``path``, a regular file of at most ``kind.max_bytes``; the caller closes it.

    Parameters
    ----------
    path
        The file.
    kind
        What it is (its cap).
    within
        The run directory it belongs to: the file must be in it, reached
        with no symbolic link below it, and belong to the directory's owner
        or (not hard-linked) to this user. None for a file the user named themselves (a
        matrix on the command line), which may be a link.

    Raises
    ------
    UnreadableRunFile
        Naming ``path`` and why (``FileNotFoundError`` and other ``OSError``
        as the system raises them).
    """
    flags = _OPEN if within is not None else _OPEN & ~os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and within is not None:
            raise UnreadableRunFile(
                path, "a symbolic link; files of a run directory are read only as regular files", errno.ELOOP
            ) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableRunFile(path, f"{_what(info.st_mode)}, not a regular file; not read")
        if info.st_size > kind.max_bytes:
            raise UnreadableRunFile(
                path,
                f"{info.st_size:,} bytes, more than the {kind.max_bytes:,} a {kind.name} may have; not read",
                errno.EFBIG,
            )
        if within is not None:
            real, owner = _real_directory(within)
            expected = os.path.join(real, _below(path, within))
            opened = _opened_path(fd) or os.path.realpath(path)
            if opened != expected:
                raise UnreadableRunFile(
                    path, f"reached through a symbolic link (it is {opened}); not read", errno.EXDEV
                )
            # A hard link to another user's file is a regular file in place: its owner tells it apart.
            # This user's own files are taken (a run resumed with sudo), unless hard-linked in.
            if info.st_uid != owner and (info.st_uid != os.geteuid() or info.st_nlink > 1):
                raise UnreadableRunFile(
                    path,
                    f"belongs to {_user(info.st_uid)}, not to the run directory's owner ({_user(owner)}); not read",
                    errno.EACCES,
                )
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike[str], kind: Kind, within: str | os.PathLike[str] | None) -> bytes:
    """The bytes of ``path`` (:func:`open_regular`), never more than ``kind.max_bytes``.

    Raises
    ------
    UnreadableRunFile
        As :func:`open_regular`, or when the file grew past the cap while read.
    """
    fd = open_regular(path, kind, within)
    try:
        chunks, total = [], 0
        while chunk := os.read(fd, min(kind.max_bytes + 1 - total, 1 << 24) or 1):
            chunks.append(chunk)
            total += len(chunk)
            if total > kind.max_bytes:
                raise UnreadableRunFile(
                    path,
                    f"grew past the {kind.max_bytes:,} bytes a {kind.name} may have; not read",
                    errno.EFBIG,
                )
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text(path: str | os.PathLike[str], kind: Kind, within: str | os.PathLike[str] | None) -> str:
    """:func:`read_bytes` decoded as ``Path.read_text(errors="replace")`` decodes: UTF-8, universal newlines."""
    text = read_bytes(path, kind, within).decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


#: The most digits of an integer in a record: every count, size and time iobench writes fits 64 bits.
MAX_INT_DIGITS = 20


class _LongInteger(ValueError):
    pass


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _LongInteger(text)
    return int(text)


def parse_json(path: str | os.PathLike[str], text: str | bytes) -> Any:
    """``text`` as JSON; too deep a document, or too long an integer, is :class:`UnreadableRunFile`.

    Raises
    ------
    ValueError
        When ``text`` is not JSON (the caller says "truncated or not JSON").
    UnreadableRunFile
        When it nests deeper than Python follows, or holds an integer of
        more than :data:`MAX_INT_DIGITS` digits (a count that large would
        make iobench loop over it).
    """
    try:
        return json.loads(text, parse_int=_integer)
    except RecursionError:
        raise UnreadableRunFile(path, "nested too deeply to be one of iobench's files; not read") from None
    except _LongInteger as exc:
        raise UnreadableRunFile(
            path,
            f"holds an integer of {len(str(exc).lstrip('-')):,} digits (at most {MAX_INT_DIGITS}); not read",
        ) from None


def read_table(
    path: str | os.PathLike[str], within: str | os.PathLike[str] | None, columns: list[str] | None = None
) -> pa.Table:
    """A parquet file as a pyarrow Table, its size told by its footer checked before any row is read.

    Raises
    ------
    UnreadableRunFile
        As :func:`open_regular`, or when the footer says more than
        :data:`MAX_ROWS` rows or :data:`MAX_TABLE_BYTES` bytes of columns.
    OSError, ValueError, pyarrow.ArrowException
        When it is not a parquet file.
    """
    import pyarrow.parquet as pq

    fd = open_regular(path, TABLE, within)
    with os.fdopen(fd, "rb") as handle, pq.ParquetFile(handle) as parquet:
        meta = parquet.metadata
        if meta.num_rows > MAX_ROWS:
            raise UnreadableRunFile(
                path, f"its footer says {meta.num_rows:,} rows, more than the {MAX_ROWS:,} read; not read"
            )
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if size > MAX_TABLE_BYTES:
            raise UnreadableRunFile(
                path,
                f"its footer says {size:,} bytes of columns, more than the {MAX_TABLE_BYTES:,} read; not read",
            )
        return parquet.read(columns=columns)


def table_metadata(path: str | os.PathLike[str], within: str | os.PathLike[str] | None) -> dict[bytes, bytes]:
    """The key-value metadata of a parquet file's schema, no row read (:func:`open_regular`'s rules)."""
    import pyarrow.parquet as pq

    fd = open_regular(path, TABLE, within)
    with os.fdopen(fd, "rb") as handle, pq.ParquetFile(handle) as parquet:
        return dict(parquet.schema_arrow.metadata or {})


# --- writing beside a run --------------------------------------------------------------------


def own_directory(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory iobench may write into, made when missing; refused when another user shapes it.

    Taken when it is a directory (not a symbolic link to one) owned by this
    user, and its parent is owned by this user or root; neither may be
    writable by others, or by a group other than this user's, unless sticky
    (where others cannot rename what is not theirs). Else another user could
    swap the directory, or a file in it, for a link to somewhere else.

    Raises
    ------
    ResultsError
        Naming the directory, its owner, and what to give instead.
    OSError
        When it cannot be made (the caller words it: disk full, read-only...).
    """
    target = Path(path)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    _check_owned(parent, (os.geteuid(), 0))
    try:
        target.mkdir()
    except FileExistsError:
        pass
    _check_owned(target, (os.geteuid(),))
    return target


def _check_owned(directory: Path, owners: tuple[int, ...]) -> None:
    info = directory.lstat()
    if stat.S_ISLNK(info.st_mode):
        raise ResultsError(
            f"{directory}: a symbolic link; iobench writes only into a real directory of its user: "
            "give another directory with -o"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise ResultsError(f"{directory}: not a directory; give a directory with -o")
    if info.st_uid not in owners:
        raise ResultsError(
            f"{directory}: belongs to user {_user(info.st_uid)}, not to this user ({_user(os.geteuid())}); "
            "iobench writes only into directories of its own: give one with -o"
        )
    sticky = bool(info.st_mode & stat.S_ISVTX)
    others = bool(info.st_mode & stat.S_IWOTH) or (
        bool(info.st_mode & stat.S_IWGRP) and info.st_gid != os.getegid()
    )
    if others and not sticky:
        raise ResultsError(
            f"{directory}: other users may write in it (mode {stat.filemode(info.st_mode)}); "
            "iobench writes only into directories of its own: give one with -o"
        )


def _user(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


#: What a spreadsheet takes for the start of a formula (or, after a tab or CR, of a new cell).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """``value``, a text starting like a formula quoted with a leading ``'`` (what spreadsheets show as text).

    A negative number stays a number: only text is changed.
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell passed through :func:`csv_cell`, and the column names too: what CSV writers write."""
    safe = frame.copy(deep=False)
    for column in safe.columns:
        values = safe[column]
        if values.dtype == object or str(values.dtype) in ("string", "str"):
            safe[column] = values.map(csv_cell, na_action="ignore")
    safe.columns = [csv_cell(c) for c in safe.columns]
    return safe


def run_of(point_dir: str | os.PathLike[str]) -> Path:
    """The run directory of a point directory (``<run>/points/<key>``): what its files are read ``within``."""
    return Path(point_dir).parent.parent
