"""Saved points → the tidy frame of SPEC §6, and :func:`load` for notebooks."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from iobench.errors import ResultsError, RunStorageError
from iobench.results.fioout import read_jobs
from iobench.results.fioout.clients import client_key, client_rows, host_share
from iobench.results.fioout.frame import FRAME_METRICS, FrameBuilder
from iobench.results.fioout.rows import FRAME_COLUMNS, Row, job_rows
from iobench.results.points import EXTRA, IDENTITY, PLACEMENT, STEADY, TELEMETRY, parameter_columns
from iobench.results.steady import with_steady
from iobench.results.telemetry import with_telemetry
from iobench.store.records import FRAME_VERSION, Manifest, PointMeta, ProcessRecord
from iobench.store.rundir import RunDir

Parsed = dict[str, list[Row]]
"""fio outputs already read during the run, keyed as :func:`parsed_key`: their rows of the frame
(:func:`~iobench.results.fioout.rows.job_rows`; a host's share of a client's output for a host)."""


class _Share(Protocol):
    """What names a host's share of a point's output: a saved process record, or a planned process."""

    @property
    def output(self) -> str: ...
    @property
    def host(self) -> str | None: ...
    @property
    def sections(self) -> Sequence[str]: ...


def parsed_key(point: str, process: _Share) -> str:
    """The :data:`Parsed` key of a process's rows: ``<point>/<output>``, ``@<host>/<sections>`` for a host's share."""
    if process.host is None:
        return f"{point}/{process.output}"
    return f"{point}/{process.output}@{process.host}/" + ",".join(process.sections)


def host_shares(point_dir: Path, processes: list[ProcessRecord], parsed: Parsed) -> Parsed:
    """Each host's rows of a fio client's output, keyed as :func:`parsed_key`; the output parsed once.

    A host's rows are those of its client (``client``: address and port, see
    :func:`~iobench.results.fioout.clients.client_key`) and of its job
    sections: with ``launch: per-target`` one host runs several job files
    through the same client.
    """
    shares: Parsed = {}
    by_output: dict[str, list[ProcessRecord]] = {}
    for process in processes:
        if process.client is not None and parsed_key(point_dir.name, process) not in parsed:
            by_output.setdefault(process.output, []).append(process)
    for name, group in by_output.items():
        output = point_dir / name
        try:
            text = output.read_text(errors="replace")
            clients = {client_key(p.client): str(p.host) for p in group if p.client}
            rows = client_rows(text, clients, origin=str(output))
        except (OSError, ValueError, ResultsError):
            continue
        for p in group:
            shares[parsed_key(point_dir.name, p)] = host_share(rows, str(p.host), p.sections)
    return shares


_NO_NUMBERS: Row = (None,) * len(FRAME_COLUMNS)
"""The fio columns of a row without fio numbers (a point that failed before fio reported)."""

_UNSET: Any = object()
"""A point without a value for a column iobench adds: NA, or fio's own value where fio has that column."""


class _Rows:
    """The rows of saved points, gathered column by column and made into one frame at the end.

    fio's rows stay what the runner read (rows for one frame builder); what
    iobench adds (placement, settings, the point's identity and parameters)
    goes into lists. A run's frame costs one frame build and one column
    block, not pandas work on every point's few rows.
    """

    def __init__(self) -> None:
        self.fio = FrameBuilder()
        self.added: dict[str, list[Any]] = {}
        self.size = 0

    def add(self, fio: list[Row] | None, columns: dict[str, list[Any]]) -> None:
        """``fio``'s rows (None: rows with no fio numbers), with iobench's ``columns`` (lists of one length)."""
        size = len(next(iter(columns.values())))
        self.fio.add(fio if fio is not None else [_NO_NUMBERS] * size)
        for name in columns.keys() - self.added.keys():
            self.added[name] = [_UNSET] * self.size
        for name, values in self.added.items():
            values.extend(columns.get(name, [_UNSET] * size))
        self.size += size

    def frame(self) -> pd.DataFrame:
        frame = self.fio.frame()
        for name in [n for n in self.added if n in frame]:  # a point's value wins over fio's
            values = self.added.pop(name)
            kept = frame[name].astype(object).tolist()
            frame[name] = [k if v is _UNSET else v for v, k in zip(values, kept, strict=True)]
        added = pd.DataFrame(
            {n: [None if v is _UNSET else v for v in vs] for n, vs in self.added.items()}, index=frame.index
        )
        return pd.concat([frame, added], axis=1) if len(added.columns) else frame


def _values(fio: list[Row], column: str) -> list[Any]:
    """One fio column of a process's rows."""
    at = FRAME_COLUMNS.index(column)
    return [row[at] for row in fio]


def _process_rows(
    point_dir: Path, meta: PointMeta, process: ProcessRecord, parsed: Parsed
) -> tuple[list[Row], dict[str, list[Any]]] | None:
    """fio's rows of one process of a point, and the placement and settings columns iobench adds to them."""
    output = point_dir / process.output
    fio = parsed.get(parsed_key(point_dir.name, process))
    if fio is None:
        if not output.is_file() or process.client is not None:
            return None  # a host's share comes from host_shares, or not at all
        try:
            fio = job_rows(read_jobs(output.read_text(errors="replace"), origin=str(output)), str(output))
        except ResultsError:
            return None
    if len(fio) == 0:
        return None
    size = len(fio)
    sections = dict(zip(process.sections, process.targets, strict=True))
    targets = [None if j is None else sections.get(str(j)) for j in _values(fio, "jobname")]
    settings = meta.settings
    disks = process.target_disks
    columns: dict[str, list[Any]] = {
        "target": targets,
        "target_node": [process.target_node] * size,
        "cpu_node": [process.cpu_node] * size,
        "cpus": [process.cpus] * size,
        "cpus_observed": _observed_per_job(_values(fio, "job_index"), process),
        "host": _values(fio, "host"),
    }
    for column in ("scheduler", "readahead_kb"):
        columns[column] = [
            next((settings.get(d, {}).get(column) for d in disks.get(t or "", []) if d in settings), None)
            for t in targets
        ]
    return fio, columns


def _observed_per_job(job_index: list[Any], process: ProcessRecord) -> list[Any]:
    """Each row's worker CPUs when fio's workers map one-to-one onto its jobs, else the union."""
    workers = [o for o in process.observed if not o.leader]
    jobs = sorted({j for j in job_index if j is not None})
    if workers and len(workers) == len(jobs):
        by_job = {job: w.cpus for job, w in zip(jobs, workers, strict=True)}
        return [by_job.get(j, process.cpus_observed) for j in job_index]
    return [process.cpus_observed] * len(job_index)


def _empty_rows(processes: list[ProcessRecord]) -> dict[str, list[Any]]:
    """The columns of a point's rows without fio numbers: one row, or one per host where it ran on hosts."""
    if not processes:
        return {"target": [None], "host": [None]}
    # One row per host where a point ran on hosts, so each host's failure shows under its name.
    chosen = processes if processes[0].host is not None else processes[:1]
    return {
        "target": [p.targets[0] if len(p.targets) == 1 else None for p in chosen],
        "target_node": [p.target_node for p in chosen],
        "cpu_node": [p.cpu_node for p in chosen],
        "cpus": [p.cpus for p in chosen],
        "cpus_observed": [p.cpus_observed for p in chosen],
        "host": [p.host for p in chosen],
    }


def _add_point(
    rows: _Rows, point_dir: Path, meta: PointMeta, run_id: str, host: str | None, parsed: Parsed
) -> None:
    """The rows of one saved point × repeat (one row without fio numbers when fio reported nothing)."""
    known = {**parsed, **host_shares(point_dir, meta.processes, parsed)}
    parts = [_process_rows(point_dir, meta, p, known) for p in meta.processes]
    found = [p for p in parts if p is not None]
    silent = [p for p, part in zip(meta.processes, parts, strict=True) if part is None and p.host is not None]
    pieces: list[tuple[list[Row] | None, dict[str, list[Any]]]] = list(found)
    if not found or silent:  # hosts that reported nothing keep a row each, as a job without I/O does
        pieces.append((None, _empty_rows(silent if found else meta.processes)))
    hosts = [h for _, columns in pieces for h in columns["host"]]
    if all(h is None for h in hosts):
        for _, columns in pieces:
            columns["host"] = [host] * len(columns["host"])
    point = {
        "run_id": run_id,
        "point": meta.point,
        "repeat": meta.repeat,
        "status": meta.status,
        "reason": meta.reason,
        "runtime_requested_ms": meta.runtime_requested_ms,
        # scheduler/readahead_kb of PLACEMENT: what the device had, read during the point
        **{name: value for name, value in meta.params.items() if name not in PLACEMENT},
    }
    for fio, columns in pieces:
        size = len(columns["host"])
        rows.add(fio, {**columns, **{name: [value] * size for name, value in point.items()}})


def point_frame(
    point_dir: Path, meta: PointMeta, run_id: str, host: str | None, parsed: Parsed | None = None
) -> pd.DataFrame:
    """The rows of one saved point × repeat (one empty row when fio reported nothing)."""
    rows = _Rows()
    _add_point(rows, point_dir, meta, run_id, host, parsed or {})
    return rows.frame()


def _tidy_types(frame: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    ints = ("point", "repeat", "target_node", "cpu_node", "readahead_kb", "runtime_requested_ms")
    for column in ints:
        if column in frame:
            frame[column] = frame[column].astype("Float64").round().astype("Int64")
    for column in ("run_id", "status", "reason", "target", "cpus", "cpus_observed", "scheduler", "host"):
        if column in frame:
            frame[column] = frame[column].astype("string")
    for column in axes:
        kinds = {type(v) for v in frame[column].dropna()}
        if kinds <= {int, bool} and kinds:
            frame[column] = frame[column].astype("Int64")
        elif kinds <= {int, float} and kinds:
            frame[column] = frame[column].astype("Float64")
        else:
            frame[column] = frame[column].astype("string")
    return frame


def base_frame(run: RunDir, parsed: Parsed | None = None) -> pd.DataFrame:
    """The tidy frame of every saved point of ``run`` before the telemetry and steady-state columns are added.

    What the default figures need (they draw neither): the CLI starts drawing
    them from it while :func:`build_frame` adds the rest. ``parsed`` spares
    re-reading outputs.
    """
    manifest = run.manifest()
    run_id = run.path.name
    host = manifest.machine.host
    rows, axes = _Rows(), []
    for point_dir, meta in run.point_metas():
        _add_point(rows, point_dir, meta, run_id, host, parsed or {})
        axes += [a for a in meta.params if a not in axes and a not in PLACEMENT and a not in IDENTITY]
    if not rows.size:
        return pd.DataFrame({c: pd.Series([], dtype="object") for c in IDENTITY})
    return _ordered(_tidy_types(rows.frame(), axes), axes, manifest)


def build_frame(run: RunDir, parsed: Parsed | None = None, base: pd.DataFrame | None = None) -> pd.DataFrame:
    """Assemble the tidy frame from every saved point of ``run`` (``parsed`` spares re-reading outputs).

    ``base``: what :func:`base_frame` returned for the same points, to finish instead of starting again.
    """
    frame = base_frame(run, parsed) if base is None else base.copy()
    if "point" not in frame:
        return frame
    manifest = run.manifest()
    axes = parameter_columns(frame)  # the matrix's axes, in the order base_frame put them
    return _ordered(with_steady(with_telemetry(frame, run), run), axes, manifest)


def _ordered(frame: pd.DataFrame, axes: list[str], manifest: Manifest) -> pd.DataFrame:
    order = [
        c for c in (*IDENTITY, *axes, *PLACEMENT, *FRAME_METRICS, *EXTRA, *STEADY, *TELEMETRY) if c in frame
    ]
    rest = [c for c in frame.columns if c not in order and c != "source"]
    return _with_machine(frame[order + rest], manifest)


def _with_machine(frame: pd.DataFrame, manifest: Manifest) -> pd.DataFrame:
    """Carry the machine facts (host, kernel, CPU model, versions) in ``frame.attrs["machine"]`` for captions."""
    frame.attrs["machine"] = {
        k: v for k, v in manifest.machine.facts().items() if k not in ("topology", "targets")
    }
    if manifest.hosts:  # fio ran on these machines, not on the client that wrote `machine`
        frame.attrs["hosts"] = [
            {k: v for k, v in h.items() if k not in ("topology", "targets")} for h in manifest.hosts
        ]
        for key in ("cpu_model", "kernel"):
            found = dict.fromkeys(str(h.get(key)) for h in manifest.hosts if h.get(key))
            frame.attrs["machine"][key] = ", ".join(found)
    return frame


def load(path: str | os.PathLike[str], *, rebuild: bool = False) -> pd.DataFrame:
    """The tidy frame of a run directory (or of a ``.parquet``/``.csv`` frame file).

    Reads ``results.parquet``; when it is missing (a run killed before the
    end, or stopped by a full disk) or ``rebuild`` is set, the frame is rebuilt
    from the saved points and written back when the disk allows.

    Parameters
    ----------
    path
        A directory made by ``iobench run``, or a frame saved by ``iobench parse -o``.
    rebuild
        Ignore ``results.parquet`` and parse the raw fio outputs again.

    Raises
    ------
    ResultsError
        When ``path`` is neither, or its schema is newer than this iobench.
    """
    if Path(path).is_file():
        return _load_frame_file(Path(path))
    run = RunDir.open(path)
    if run.frame_path.is_file() and not rebuild:
        import pyarrow.parquet as pq

        metadata = pq.read_schema(run.frame_path).metadata or {}
        version = int(metadata.get(b"iobench_schema_version", b"0"))
        if version == FRAME_VERSION:
            return _with_machine(pd.read_parquet(run.frame_path), run.manifest())
        if version > FRAME_VERSION:
            raise ResultsError(
                f"{run.frame_path}: frame schema version {version} was written by a newer iobench "
                f"(this one reads {FRAME_VERSION}); upgrade iobench, or `iobench.load(path, rebuild=True)` "
                "rebuilds it from the points"
            )
    frame = build_frame(run)
    # Saving is only a cache: a full or read-only disk must not keep anyone from their results.
    with contextlib.suppress(RunStorageError):
        run.write_frame(frame)
    return frame


def _load_frame_file(path: Path) -> pd.DataFrame:
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        if path.suffix == ".csv":
            return pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: cannot read the frame: {exc}") from None
    raise ResultsError(f"{path}: not a run directory nor a .parquet/.csv frame (see `iobench parse -o`)")
