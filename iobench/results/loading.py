""":func:`load`: a run's tidy frame, from its cache when that still holds, and how far the run got.

Loading a run directory lists its point directories once
(:func:`~iobench.store.inventory.take_inventory`), uses ``results.parquet``
when it is still the frame of those points
(:mod:`~iobench.results.framecache`) and rebuilds it otherwise
(:func:`~iobench.results.assemble.build_frame`), saving it again unless a
sweep is running in the directory. Nothing on disk is left out: a point
directory that cannot be read is a ``damaged`` row naming the file, a
supporting file that cannot be read leaves NA in its columns and a note.

What the caller is told, as facts: ``attrs["run"]`` (:meth:`RunState.facts
<iobench.store.inventory.RunState.facts>`: planned, done, missing, whether a
sweep is running) and ``attrs["notes"]``. :func:`load` also warns
(:class:`RunWarning`) when the run is incomplete or something was lost, so
that a notebook shows it; the CLI and the report word the same facts with the
command that finishes the run.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from iobench.errors import ResultsError, RunStorageError
from iobench.results.assemble import BUILT_FROM, BuiltFrom, build_frame, with_machine
from iobench.results.framecache import read_cached, save_frame
from iobench.store.inventory import RunState, run_state, take_inventory
from iobench.store.rundir import FINISHED, RunDir
from iobench.store.untrusted import TABLE, UnreadableRunFile, own_directory, read_bytes, read_table

#: ``attrs`` keys of a loaded frame: the run's state (a dict of facts) and the notes (a list of str).
RUN, NOTES = "run", "notes"
#: How many names a note lists before it counts the rest.
SHOWN = 5


class RunWarning(UserWarning):
    """A run loaded is incomplete, or lost something (damaged points, unreadable files, a stale cache)."""


@dataclass(frozen=True)
class Loaded:
    """A run's frame, how far the run got, and what was noted while loading it."""

    frame: pd.DataFrame
    state: RunState
    notes: tuple[str, ...]


def _some(lines: Sequence[str], what: str) -> list[str]:
    """``lines``, or the first :data:`SHOWN` of them and how many more."""
    if len(lines) <= SHOWN:
        return list(lines)
    return [*lines[:SHOWN], f"and {len(lines) - SHOWN} more {what}"]


def _damage_notes(frame: pd.DataFrame) -> list[str]:
    if "status" not in frame or "reason" not in frame:
        return []
    damaged = frame[frame["status"].eq("damaged").fillna(False)].drop_duplicates(
        ["point", "repeat", "reason"]
    )
    if damaged.empty:
        return []
    count = len(damaged)
    head = (
        f"{count} point-run{'' if count == 1 else 's'} damaged (status damaged in the frame, "
        "no numbers; a resume runs them again):"
    )
    reasons = [str(r) for r in damaged["reason"].fillna("?")]
    return [head, *(f"  {r}" for r in _some(reasons, "damaged point-runs"))]


def _statuses(frame: pd.DataFrame) -> dict[str, str]:
    """Each point-run's key and status, from a frame (rows without a point number are not keyed)."""
    if not {"point", "repeat", "status"} <= set(frame.columns):
        return {}
    first = frame[["point", "repeat", "status"]].dropna(subset=["point", "repeat"])
    first = first.drop_duplicates(["point", "repeat"])
    return {
        f"{int(p):04d}-r{int(r)}": str(s)
        for p, r, s in zip(first["point"], first["repeat"], first["status"], strict=True)
    }


def open_run(path: str | os.PathLike[str], *, rebuild: bool = False) -> Loaded:
    """A run directory's frame (cached or rebuilt), its state and the notes; saves a rebuilt frame when allowed.

    Parameters
    ----------
    path
        A directory made by ``iobench run``.
    rebuild
        Ignore ``results.parquet`` and build the frame from the points again.

    Raises
    ------
    ResultsError
        When ``path`` is not a run directory, its manifest cannot be read, or
        two of its point directories hold the same point-run.
    """
    run = RunDir.open(path)
    inventory = take_inventory(run, records=False)  # the cache is checked against stamps alone
    notes: list[str] = []
    frame, why = (None, None) if rebuild else read_cached(run, inventory)
    if why is not None:
        notes.append(f"{why}: rebuilt from the points")
    if frame is not None:
        state = run_state(inventory, _statuses(frame))
        frame = with_machine(frame, run.manifest())
    else:
        inventory = inventory.with_records()
        frame = build_frame(run, inventory=inventory)
        # The frame's statuses: an ok record whose fio output cannot be read is damaged there.
        state = run_state(inventory, _statuses(frame))
        if state.running:
            notes.append(
                "a sweep is running in this run directory: the frame was built in memory and not saved"
            )
        else:
            try:
                own_directory(run.path)
            except ResultsError as exc:
                notes.append(f"the frame was not saved: {exc}")
            else:
                # Saving is only a cache: a full or read-only disk must not keep anyone from their results.
                with contextlib.suppress(RunStorageError):
                    save_frame(run, frame)
    if inventory.folder_missing:
        notes.append(f"{run.points} is missing: no point-run is on disk")
    notes += _damage_notes(frame)
    built = frame.attrs.get(BUILT_FROM)
    if isinstance(built, BuiltFrom) and built.notes:
        notes.append("supporting files that cannot be read (NA in their columns):")
        notes += [f"  {n}" for n in _some(built.notes, "files")]
    return Loaded(frame, state, tuple(notes))


def finished_keys(path: str | os.PathLike[str]) -> set[str]:
    """The point-runs a resume keeps: those ``ok`` or ``skipped`` in the frame (a damaged point runs again).

    :meth:`RunDir.finished_keys <iobench.store.rundir.RunDir.finished_keys>`
    reads the records alone: an ``ok`` record whose fio output cannot be read
    would count as finished.

    Raises
    ------
    ResultsError
        As :func:`open_run`.
    """
    loaded = open_run(path)
    return {key for key, status in _statuses(loaded.frame).items() if status in FINISHED}


def state_text(facts: Mapping[str, object]) -> str | None:
    """How far a run got, in words (None when it is complete): ``incomplete: 5 of 8 point-runs done, ...``.

    Parameters
    ----------
    facts
        :meth:`RunState.facts <iobench.store.inventory.RunState.facts>` (a loaded frame's ``attrs["run"]``).
    """
    if facts.get("complete"):
        return None
    done, planned, missing = facts.get("done"), facts.get("planned"), facts.get("missing")
    counted = (
        f"{done} of {planned} point-runs done, {missing} missing" if planned else f"{done} point-runs done"
    )
    status = facts.get("status")
    saved = facts.get("saved") or {}
    damaged = int(saved.get("damaged", 0)) if isinstance(saved, Mapping) else 0
    unsaved = max((missing if isinstance(missing, int) else 0) - damaged, 0)
    whys = []
    if facts.get("points_folder_missing"):
        whys.append("its points folder is gone")
    elif facts.get("running"):
        whys.append("its sweep is still running")
    elif status == "running":
        whys.append("its sweep ended without recording an end (no iobench process holds the run directory)")
    elif status == "stopped":
        whys.append(f"it was stopped: {facts.get('stopped_by') or 'see manifest.json'}")
    elif status == "interrupted":
        whys.append("it was interrupted")
    elif unsaved:
        whys.append(f"{unsaved} never ran")
    if damaged:
        whys.append(f"{damaged} damaged (files that cannot be read)")
    why = "; ".join(whys) or "see its points"
    return f"incomplete: {counted}; {why}"


def load(path: str | os.PathLike[str], *, rebuild: bool = False) -> pd.DataFrame:
    """The tidy frame of a run directory (or of a ``.parquet``/``.csv`` frame file).

    Reads ``results.parquet`` when it is still the frame of the points on disk
    (the same point directories, none of their files changed, the same
    schema); otherwise — a point added, removed or rewritten, a frame that
    cannot be read, ``rebuild`` — the frame is rebuilt from the points and
    written back when the disk allows and no sweep is running there.

    Parameters
    ----------
    path
        A directory made by ``iobench run``, or a frame saved by ``iobench parse -o``.
    rebuild
        Ignore ``results.parquet`` and parse the raw fio outputs again.

    Returns
    -------
    pandas.DataFrame
        The tidy frame (docs/frame.md); a run directory's carries
        ``attrs["run"]`` (planned, done, missing, ``running``, ``complete``,
        the manifest's status and what stopped it) and ``attrs["notes"]``
        (the cache rebuilt and why, damaged points, unreadable files).

    Warns
    -----
    RunWarning
        When the run is incomplete (still running, stopped, killed) or a note was made.

    Raises
    ------
    ResultsError
        When ``path`` is neither, its manifest cannot be read or is newer
        than this iobench, or two point directories hold the same point-run.
    """
    if Path(path).is_file():
        return _load_frame_file(Path(path))
    loaded = open_run(path, rebuild=rebuild)
    frame = loaded.frame
    frame.attrs[RUN] = loaded.state.facts()
    frame.attrs[NOTES] = list(loaded.notes)
    said = [text for text in (state_text(frame.attrs[RUN]),) if text] + list(loaded.notes)
    if said:
        warnings.warn(RunWarning(f"{loaded.state.run_dir}: " + "\n".join(said)), stacklevel=2)
    return frame


def _load_frame_file(path: Path) -> pd.DataFrame:
    import pyarrow as pa

    try:
        if path.suffix == ".parquet":
            frame: pd.DataFrame = read_table(path, None).to_pandas()
            return frame
        if path.suffix == ".csv":
            return pd.read_csv(io.BytesIO(read_bytes(path, TABLE, None)))
    except UnreadableRunFile as exc:
        raise ResultsError(f"{path}: cannot read the frame: {exc.strerror}") from None
    except (OSError, ValueError, RecursionError, pa.ArrowException) as exc:
        raise ResultsError(f"{path}: cannot read the frame: {exc}") from None
    raise ResultsError(f"{path}: not a run directory nor a .parquet/.csv frame (see `iobench parse -o`)")
