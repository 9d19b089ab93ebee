"""The run directory (docs/running.md): points saved atomically, the manifest, the tidy frame.

Every file iobench writes for a run reaches its final name in one rename, after
its bytes are on disk: a full disk, a read-only remount or a removed directory
leaves the final name absent, never half written, and becomes a
:class:`~iobench.errors.RunStorageError` naming the path.

The records (``manifest.json``, each ``meta.json``) are the typed models of
:mod:`iobench.store.records`, with their schema history; this class is the only
code that reads or writes them in a run directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from iobench.errors import (
    FULL,
    EnvironmentFault,
    HostLost,
    ResultsError,
    RunStorageError,
    SafetyError,
    TargetVanished,
)
from iobench.store.atomic import atomic_replacing, fsync_directory
from iobench.store.records import Manifest, PointMeta, RecordError, read_record, record_json

if TYPE_CHECKING:
    import pandas as pd

FINISHED = ("ok", "skipped")
PROBE_BYTES = 64 * 1024
#: How long a sweep waits for a reader's look at its run directory (:meth:`RunDir.sweeping`).
SWEEP_LOCK_WAIT_S = 2.0


@contextlib.contextmanager
def storage(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an :class:`OSError` raised while writing ``path`` into :class:`RunStorageError`."""
    try:
        yield
    except OSError as exc:
        raise RunStorageError.from_os_error(exc, path) from None


@contextlib.contextmanager
def replacing(final: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``final`` (same suffix) that becomes ``final`` when the block ends.

    :func:`iobench.store.atomic.atomic_replacing`, whose failures name ``final``: the
    bytes are fsync'd before the rename (errors a file system reports late,
    such as quota on network file systems, stop it); on any failure the
    temporary file is removed and ``final`` is left as it was.

    Raises
    ------
    RunStorageError
        When writing, syncing or renaming fails (disk full, read-only, removed...).
    """
    target = Path(final)
    try:
        with atomic_replacing(target) as tmp:
            yield tmp
    except OSError as exc:
        raise RunStorageError.from_os_error(exc, target) from None


def _write_record(path: Path, record: Manifest) -> None:
    """Write a record through a temporary name, so a reader never sees half a file."""
    text = record_json(record)
    with replacing(path) as tmp:
        tmp.write_text(text)


def write_text(path: Path, text: str, *, sync: bool = False) -> None:
    """Write a file of a point that is still being staged (its directory is renamed as a whole).

    ``sync``: its bytes reach the disk before this returns (``meta.json``, which
    says the point finished, is on disk before the rename that publishes it).
    """
    with storage(path), path.open("w") as handle:
        handle.write(text)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())


def probe(directory: Path, writing: str | os.PathLike[str]) -> None:
    """Check that ``directory`` still takes a few blocks of data.

    fio exits 0 when the disk fills while it writes its output, leaving the
    output empty or cut short; this tells that case from a fio problem.

    Raises
    ------
    RunStorageError
        Naming ``writing`` (the file that could not be written), when the
        directory is full, read-only or gone.
    """
    path = directory / ".iobench-probe"
    try:
        with path.open("wb") as handle:
            handle.write(b"\0" * PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise RunStorageError.from_os_error(exc, writing) from None
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def mount_point(path: str | os.PathLike[str]) -> Path:
    """The mount point of the file system holding ``path`` (or its nearest existing parent)."""
    current = Path(os.path.abspath(path))
    while not current.exists() and current != current.parent:
        current = current.parent
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return current


def remedy(fault: EnvironmentFault) -> str:
    """What the user does about ``fault`` before finishing: ``free space on /mnt/data``, ..."""
    if isinstance(fault, TargetVanished):
        return f"bring {fault.path} back"
    if isinstance(fault, HostLost):
        return f"make sure {fault.path} can be reached again"
    if fault.errno in FULL:
        return f"free space on {mount_point(fault.path)}"
    if fault.errno == errno.EROFS:
        return f"make {mount_point(fault.path)} writable again"
    if fault.errno in (errno.EACCES, errno.EPERM):
        return f"give this user write access to {fault.path}"
    return "fix that"


def describe_counts(counts: dict[str, int]) -> str:
    """``3 points (2 ok, 1 failed)``."""
    total = sum(counts.values())
    detail = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return f"{total} point{'' if total == 1 else 's'}" + (f" ({detail})" if detail else "")


def now() -> str:
    """The local time, ISO 8601 with offset."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunDir:
    """A results directory: ``matrix.yaml``, ``manifest.json``, ``points/``, ``results.parquet``."""

    path: Path

    @property
    def points(self) -> Path:
        """Where each point × repeat gets its directory."""
        return self.path / "points"

    @property
    def manifest_path(self) -> Path:
        """``manifest.json``."""
        return self.path / "manifest.json"

    @property
    def frame_path(self) -> Path:
        """``results.parquet``."""
        return self.path / "results.parquet"

    @property
    def figures(self) -> Path:
        """``figures/``."""
        return self.path / "figures"

    @classmethod
    def create(cls, out: str | os.PathLike[str], name: str, matrix_text: str) -> RunDir:
        """Make ``out/<name>-<YYYYmmdd-HHMMSS>/`` (suffixed if taken) with ``matrix.yaml``.

        Raises
        ------
        RunStorageError
            When the directory cannot be made or filled; nothing is left behind.
        """
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = Path(out) / f"{name}-{stamp}"
        path, n = base, 1
        with storage(out):
            Path(out).mkdir(parents=True, exist_ok=True)
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                n += 1
                path = base.with_name(f"{base.name}-{n}")
            except OSError as exc:
                raise RunStorageError.from_os_error(exc, path) from None
        run = cls(path)
        try:
            with storage(run.points):
                run.points.mkdir()
            with replacing(path / "matrix.yaml") as tmp:
                tmp.write_text(matrix_text)
        except RunStorageError:
            run.remove()
            raise
        return run

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> RunDir:
        """An existing run directory.

        Raises
        ------
        ResultsError
            When ``path`` is not a run directory or its schema is newer than this iobench.
        """
        run = cls(Path(path))
        if not run.manifest_path.exists() and not run.manifest_path.is_symlink():
            raise ResultsError(f"{path}: not an iobench run directory (no manifest.json)")
        run.manifest()
        return run

    def manifest(self) -> Manifest:
        """The manifest as saved (migrated when an older iobench wrote it).

        Raises
        ------
        RecordError
            Naming the file and field when it is corrupt, truncated or newer than this iobench.
        """
        return read_record(Manifest, self.manifest_path, self.path)

    def write_manifest(self, manifest: Manifest) -> None:
        """Save the manifest atomically (:class:`RunStorageError` when it cannot be written)."""
        _write_record(self.manifest_path, manifest)

    def staging(self, key: str) -> Path:
        """A fresh, empty directory for a point that is about to run."""
        path = self.points / f".{key}.partial"
        with storage(path):
            if path.exists():
                shutil.rmtree(path)
            path.mkdir()
        return path

    def commit(self, staging: Path, key: str, meta: PointMeta) -> Path:
        """Write ``meta.json`` and move the point into place in one rename.

        ``meta.json`` needs no name of its own to be renamed from: nothing reads
        a staging directory, and the rename below publishes the point whole.
        """
        write_text(staging / "meta.json", record_json(meta), sync=True)
        final = self.points / key
        with storage(final):
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
            fsync_directory(self.points)
        return final

    def discard(self, staging: Path) -> None:
        """Remove a point's staging directory, as far as the file system still allows."""
        shutil.rmtree(staging, ignore_errors=True)

    def remove(self) -> None:
        """Remove the whole run directory, as far as the file system allows (a run that never started)."""
        shutil.rmtree(self.path, ignore_errors=True)

    @contextlib.contextmanager
    def sweeping(self) -> Iterator[None]:
        """Mark the run directory as being swept for the duration of the block (:meth:`sweep_running`).

        An ``flock`` on the directory itself, released by the kernel when the
        process ends however it ends: a killed sweep leaves no lock behind. A
        file system without ``flock`` leaves the run unmarked.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise RunStorageError.from_os_error(exc, self.path) from None
        try:
            self._lock(fd)
            yield
        finally:
            os.close(fd)

    def _lock(self, fd: int) -> None:
        # A reader holds its shared lock only for the instant it takes to look: wait that long.
        deadline = time.monotonic() + SWEEP_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SafetyError(
                        f"{self.path}: another iobench run is sweeping this run directory; "
                        "wait for it to end, or resume it once it has"
                    ) from None
                time.sleep(0.05)
            except OSError:
                return  # no flock on this file system: the run goes on unmarked

    def sweep_running(self) -> bool:
        """Whether a sweep holds this run directory now (:meth:`sweeping`), in this process or another."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False  # no flock on this file system: nothing can be known, nothing is claimed
        finally:
            os.close(fd)  # closing releases the shared lock
        return False

    def point_metas(self) -> Iterator[tuple[Path, PointMeta]]:
        """Every saved point whose ``meta.json`` can be read, with it, in key order.

        A point directory whose record cannot be read is not yielded: it did
        not finish as far as a resume is concerned, and
        :func:`iobench.store.inventory.take_inventory` accounts for it (a
        ``damaged`` row of the frame, naming the file).
        """
        if not self.points.is_dir():
            return
        for path in sorted(self.points.iterdir()):
            if path.name.startswith(".") or not (path / "meta.json").is_file():
                continue
            try:
                meta = read_record(PointMeta, path / "meta.json", self.path)
            except RecordError:
                continue
            yield path, meta

    def point_meta(self, key: str) -> PointMeta | None:
        """The saved point ``key``'s record, or None when it was not saved or cannot be read."""
        try:
            return read_record(PointMeta, self.points / key / "meta.json", self.path)
        except (RecordError, OSError):
            return None

    def finished_keys(self) -> set[str]:
        """Points that need not run again on resume (``ok`` or ``skipped``)."""
        return {meta.key for _, meta in self.point_metas() if meta.status in FINISHED}

    def write_frame(self, frame: pd.DataFrame, metadata: Mapping[str, str]) -> None:
        """Save ``results.parquet`` atomically, with ``metadata`` in the file's schema.

        What the metadata says (the schema and the points the frame was built
        from) is :mod:`iobench.results.framecache`'s; the frame's ``attrs`` are
        not saved (they describe the run, which is read again with the frame).

        Raises
        ------
        RunStorageError
            When it cannot be written; no ``results.parquet`` is left half written.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        bare = frame.copy(deep=False)
        bare.attrs = {}
        table = pa.Table.from_pandas(bare, preserve_index=False)
        merged = dict(table.schema.metadata or {})
        merged.update({key.encode(): value.encode() for key, value in metadata.items()})
        table = table.replace_schema_metadata(merged)
        with replacing(self.frame_path) as tmp:
            pq.write_table(table, tmp)

    def drop_frame(self) -> None:
        """Remove ``results.parquet`` (it would be stale once new points are added)."""
        with storage(self.frame_path):
            self.frame_path.unlink(missing_ok=True)
