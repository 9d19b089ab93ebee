"""The run directory of SPEC §6: points saved atomically, the manifest, the tidy frame.

Every file iobench writes for a run reaches its final name in one rename, after
its bytes are on disk: a full disk, a read-only remount or a removed directory
leaves the final name absent, never half written, and becomes a
:class:`~iobench.errors.RunStorageError` naming the path.

Schema history (``schema_version`` in ``manifest.json``, every ``meta.json`` and
the parquet file's metadata):

1. first version.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from iobench.errors import FULL, EnvironmentFault, ResultsError, RunStorageError, TargetVanished
from iobench.store.files import atomic_replacing

SCHEMA_VERSION = 1
FINISHED = ("ok", "skipped")
PROBE_BYTES = 64 * 1024


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

    :func:`iobench.store.files.atomic_replacing`, whose failures name ``final``: the
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


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON through a temporary name, so a reader never sees half a file."""
    text = json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
    with replacing(path) as tmp:
        tmp.write_text(text)


def write_text(path: Path, text: str) -> None:
    """Write a file of a point that is still being staged (its directory is renamed as a whole)."""
    with storage(path):
        path.write_text(text)


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
        if not run.manifest_path.is_file():
            raise ResultsError(f"{path}: not an iobench run directory (no manifest.json)")
        version = run.manifest().get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ResultsError(
                f"{path}: results schema version {version!r} is newer than this iobench reads "
                f"({SCHEMA_VERSION}); upgrade iobench"
            )
        return run

    def manifest(self) -> dict[str, Any]:
        """The manifest as saved."""
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise ResultsError(f"{self.manifest_path}: unreadable: {exc}") from None
        if not isinstance(data, dict):
            raise ResultsError(f"{self.manifest_path}: not a JSON object")
        return data

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Save the manifest atomically (:class:`RunStorageError` when it cannot be written)."""
        write_json(self.manifest_path, {"schema_version": SCHEMA_VERSION, **manifest})

    def staging(self, key: str) -> Path:
        """A fresh, empty directory for a point that is about to run."""
        path = self.points / f".{key}.partial"
        with storage(path):
            if path.exists():
                shutil.rmtree(path)
            path.mkdir()
        return path

    def commit(self, staging: Path, key: str, meta: dict[str, Any]) -> Path:
        """Write ``meta.json`` and move the point into place in one rename."""
        write_json(staging / "meta.json", {"schema_version": SCHEMA_VERSION, **meta})
        final = self.points / key
        with storage(final):
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging, final)
        return final

    def discard(self, staging: Path) -> None:
        """Remove a point's staging directory, as far as the file system still allows."""
        shutil.rmtree(staging, ignore_errors=True)

    def remove(self) -> None:
        """Remove the whole run directory, as far as the file system allows (a run that never started)."""
        shutil.rmtree(self.path, ignore_errors=True)

    def point_metas(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        """Every saved point with its ``meta.json``, in key order."""
        if not self.points.is_dir():
            return
        for path in sorted(self.points.iterdir()):
            if path.name.startswith(".") or not (path / "meta.json").is_file():
                continue
            try:
                meta = json.loads((path / "meta.json").read_text())
            except ValueError as exc:
                raise ResultsError(f"{path / 'meta.json'}: unreadable: {exc}") from None
            yield path, meta

    def finished_keys(self) -> set[str]:
        """Points that need not run again on resume (``ok`` or ``skipped``)."""
        return {meta["key"] for _, meta in self.point_metas() if meta.get("status") in FINISHED}

    def write_frame(self, frame: pd.DataFrame) -> None:
        """Save ``results.parquet`` atomically, tagged with the schema version.

        Raises
        ------
        RunStorageError
            When it cannot be written; no ``results.parquet`` is left half written.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False)
        metadata = dict(table.schema.metadata or {})
        metadata[b"iobench_schema_version"] = str(SCHEMA_VERSION).encode()
        table = table.replace_schema_metadata(metadata)
        with replacing(self.frame_path) as tmp:
            pq.write_table(table, tmp)

    def drop_frame(self) -> None:
        """Remove ``results.parquet`` (it would be stale once new points are added)."""
        with storage(self.frame_path):
            self.frame_path.unlink(missing_ok=True)
