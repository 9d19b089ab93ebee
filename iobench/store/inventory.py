"""What a run directory holds: every point directory (readable or not) and how far the run got.

A run directory outlives the machine it ran on: it is copied, half-synced,
read while its sweep still runs, killed. :func:`take_inventory` lists every
point directory under ``points/`` once, with

- its ``meta.json`` read, or the reason it cannot be (missing, empty,
  truncated, newer than this iobench), naming the file: such a point is
  *damaged*, never left out;
- a stamp of its files (names, sizes, modification times) that changes when
  any of them changes: what a saved frame records it was built from;

and refuses two directories that hold the same point-run (a copied folder),
naming both. :func:`run_state` adds what the manifest planned and whether a
sweep holds the directory now: planned, done, missing.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from iobench.errors import ResultsError
from iobench.store.records import PointMeta, RecordError, read_record
from iobench.store.rundir import RunDir
from iobench.store.untrusted import run_of

#: A point directory's name: ``<point>-r<repeat>`` (``0003-r2``).
KEY = re.compile(r"^(\d+)-r(\d+)$")
#: Statuses of a point-run that ran to an end (a resume keeps ok and skipped, runs the rest again).
ENDED = frozenset({"ok", "skipped", "failed", "timeout"})
#: The status of a point directory whose record or fio output cannot be read.
DAMAGED = "damaged"


@dataclass(frozen=True)
class SavedPoint:
    """One directory under ``points/``: its record, or why it cannot be read.

    Attributes
    ----------
    path : Path
        The point directory.
    meta : PointMeta or None
        Its ``meta.json``; None when it cannot be read.
    problem : str or None
        Why ``meta.json`` cannot be read, naming the file; None when it was read.
    stamp : str
        Changes whenever a file of the directory is added, removed or rewritten.
    """

    path: Path
    meta: PointMeta | None
    problem: str | None
    stamp: str

    @property
    def key(self) -> str:
        """The point-run's key (``0003-r2``): its record's, else the directory's name."""
        return self.meta.key if self.meta is not None else self.path.name

    @property
    def point(self) -> int | None:
        """The point number: its record's, else read from the directory's name (None when it is not a key)."""
        if self.meta is not None:
            return self.meta.point
        match = KEY.match(self.path.name)
        return int(match[1]) if match else None

    @property
    def repeat(self) -> int | None:
        """The repeat number, as :attr:`point`."""
        if self.meta is not None:
            return self.meta.repeat
        match = KEY.match(self.path.name)
        return int(match[2]) if match else None


@dataclass(frozen=True)
class Inventory:
    """Every point directory of a run, in name order.

    Attributes
    ----------
    run : RunDir
        The run directory.
    points : tuple of SavedPoint
        Readable and damaged alike.
    folder_missing : bool
        ``points/`` itself is not there.
    records : bool
        Each ``meta.json`` has been read (else only listed and stamped).
    """

    run: RunDir
    points: tuple[SavedPoint, ...]
    folder_missing: bool = False
    records: bool = True

    def with_records(self) -> Inventory:
        """The same point directories with each ``meta.json`` read (damaged ones with why not).

        Raises
        ------
        ResultsError
            When two directories hold the same point-run, naming both.
        """
        if self.records:
            return self
        points = tuple(_read(saved) if saved.problem is None else saved for saved in self.points)
        first: dict[str, SavedPoint] = {}
        for saved in points:
            if saved.meta is None:
                continue
            other = first.setdefault(saved.key, saved)
            if other is not saved:
                raise ResultsError(
                    f"{self.run.points}: two directories hold point-run {saved.key}: {other.path.name} and "
                    f"{saved.path.name} (a copy?); move the one that does not belong out of points/"
                )
        return Inventory(self.run, points, self.folder_missing, records=True)

    def readable(self) -> Iterator[tuple[Path, PointMeta]]:
        """Each point whose ``meta.json`` was read, with it (what :meth:`RunDir.point_metas` yields)."""
        for saved in self.points:
            if saved.meta is not None:
                yield saved.path, saved.meta

    def damaged(self) -> list[SavedPoint]:
        """The points whose ``meta.json`` cannot be read."""
        return [saved for saved in self.points if saved.meta is None]

    def stamps(self) -> dict[str, str]:
        """Each point directory's name and stamp: what a frame built now is built from."""
        return {saved.path.name: saved.stamp for saved in self.points}


def _stamp(entries: list[os.DirEntry[str]]) -> str:
    """A digest of the files' names, sizes and modification times (a rewrite changes one of them)."""
    digest = hashlib.blake2b(digest_size=8)
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            digest.update(f"{entry.name}/?\0".encode())
            continue
        digest.update(f"{entry.name}/{info.st_size}/{info.st_mtime_ns}\0".encode())
    return f"{len(entries)}:{digest.hexdigest()}"


def _listed(path: Path) -> SavedPoint:
    """A point directory stamped, its record not read yet (or why it cannot be)."""
    if path.is_symlink():
        return SavedPoint(path, None, f"{path}: a symbolic link, not a point directory; not read", "link")
    try:
        with os.scandir(path) as found:
            entries = sorted(found, key=lambda e: e.name)
    except OSError as exc:
        return SavedPoint(path, None, f"{path}: cannot list the point directory: {exc.strerror}", "?")
    stamp = _stamp(entries)
    if not any(entry.name == "meta.json" for entry in entries):
        return SavedPoint(path, None, f"{path / 'meta.json'}: missing (the point's record)", stamp)
    return SavedPoint(path, None, None, stamp)


def _read(saved: SavedPoint) -> SavedPoint:
    try:
        meta = read_record(PointMeta, saved.path / "meta.json", run_of(saved.path))
    except RecordError as exc:
        return SavedPoint(saved.path, None, str(exc), saved.stamp)
    return SavedPoint(saved.path, meta, None, saved.stamp)


def take_inventory(run: RunDir, *, records: bool = True) -> Inventory:
    """Every point directory of ``run``: stamped, read, damaged ones with their reason.

    Staging directories (``points/.<key>.partial``, a point still running or
    cut short) and files beside the point directories are not point-runs.

    Parameters
    ----------
    run : RunDir
        The run directory.
    records : bool, default True
        Read each ``meta.json`` too (:meth:`Inventory.with_records` reads them later).

    Returns
    -------
    Inventory
        In directory name order.

    Raises
    ------
    ResultsError
        When two directories hold the same point-run (naming both), or
        ``points/`` cannot be listed.
    """
    try:
        with os.scandir(run.points) as found:
            # d_type tells directories apart without a stat each; a link to one is listed, never followed
            names = sorted(
                e.name for e in found if not e.name.startswith(".") and (e.is_dir() or e.is_symlink())
            )
    except FileNotFoundError:
        return Inventory(run, (), folder_missing=True)
    except OSError as exc:
        raise ResultsError(f"{run.points}: cannot list the points: {exc.strerror}") from None
    inventory = Inventory(run, tuple(_listed(run.points / name) for name in names), records=False)
    return inventory.with_records() if records else inventory


@dataclass(frozen=True)
class RunState:
    """How far a run got: what its manifest planned, what is on disk, whether a sweep holds it now.

    Attributes
    ----------
    run_dir : str
        The run directory.
    planned : int or None
        Point-runs the matrix asked for (points × repeats); None when the manifest does not say.
    saved : dict of str to int
        Point-runs on disk by status, ``damaged`` for those that cannot be read.
    done : int
        Point-runs of the plan that ran to an end (ok, skipped, failed or timed out).
    missing : int
        Point-runs of the plan not done: never saved, interrupted, or damaged.
    running : bool
        A sweep holds the run directory now.
    status : str
        What the manifest says: ``running``, ``finished``, ``interrupted`` or ``stopped``.
    stopped_by : str or None
        What stopped it, as the manifest says.
    matrix_source : str or None
        The matrix file the run was started with, as given then.
    points_folder_missing : bool
        ``points/`` is not there.
    """

    run_dir: str
    planned: int | None
    saved: dict[str, int]
    done: int
    missing: int
    running: bool
    status: str
    stopped_by: str | None
    matrix_source: str | None
    points_folder_missing: bool = False

    @property
    def complete(self) -> bool:
        """No sweep holds it and every planned point-run is done."""
        return not self.running and self.missing == 0 and self.status != "running"

    def facts(self) -> dict[str, object]:
        """Every attribute and :attr:`complete`, as a plain dict (a frame's ``attrs["run"]``)."""
        return {
            "run_dir": self.run_dir,
            "planned": self.planned,
            "saved": dict(self.saved),
            "done": self.done,
            "missing": self.missing,
            "running": self.running,
            "status": self.status,
            "stopped_by": self.stopped_by,
            "matrix_source": self.matrix_source,
            "points_folder_missing": self.points_folder_missing,
            "complete": self.complete,
        }


def statuses(inventory: Inventory) -> dict[str, str]:
    """Each point directory's key and status (``damaged`` when its record cannot be read); records read."""
    return {
        saved.key: str(saved.meta.status) if saved.meta else DAMAGED
        for saved in inventory.with_records().points
    }


def run_state(inventory: Inventory, status_of: Mapping[str, str] | None = None) -> RunState:
    """How far the run of ``inventory`` got (:class:`RunState`).

    Parameters
    ----------
    inventory : Inventory
        The run's point directories.
    status_of : mapping of str to str, optional
        Each point-run's key and status, where they are known already (a
        cached frame's); else read from the records (:func:`statuses`).

    Raises
    ------
    RecordError
        When ``manifest.json`` cannot be read.
    """
    run = inventory.run
    manifest = run.manifest()
    found = statuses(inventory) if status_of is None else status_of
    saved = Counter(found.values())
    if len(found) < len(inventory.points):  # directories no key could be read from
        saved[DAMAGED] += len(inventory.points) - len(found)
    ended = {key for key, status in found.items() if status in ENDED}
    planned = manifest.points * manifest.repeat if manifest.points and manifest.repeat else None
    if planned is None:
        done, missing = len(ended), sum(n for status, n in saved.items() if status not in ENDED)
    else:
        keys = {f"{p:04d}-r{r}" for p in range(1, manifest.points + 1) for r in range(1, manifest.repeat + 1)}
        done = len(keys & ended)
        missing = planned - done
    return RunState(
        run_dir=str(run.path),
        planned=planned,
        saved=dict(sorted(saved.items())),
        done=done,
        missing=missing,
        running=run.sweep_running(),
        status=manifest.status,
        stopped_by=manifest.stopped_by,
        matrix_source=manifest.matrix_source,
        points_folder_missing=inventory.folder_missing,
    )
