"""Saved points → the tidy frame: one row per point × repeat × job × direction (docs/frame.md).

Every point directory becomes rows, readable or not (:mod:`iobench.store.inventory`):
a point whose ``meta.json`` cannot be read, or whose fio output an ``ok``
point cannot do without is missing, empty or not fio's, is one row with status
``damaged`` and the reason naming the file; its parameters come from another
repeat of the same point where one is readable. The frame carries what it
was built from (:class:`BuiltFrom`, in ``attrs``) for the cache that saves it
(:mod:`iobench.results.framecache`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from iobench.errors import ResultsError
from iobench.results import schema
from iobench.results.fioout import read_jobs
from iobench.results.fioout.clients import client_key, client_rows, host_share
from iobench.results.fioout.frame import FrameBuilder
from iobench.results.fioout.rows import FRAME_COLUMNS, Row, job_rows
from iobench.results.hostoutliers import COLUMNS as OUTLIER_COLUMNS
from iobench.results.hostoutliers import outliers
from iobench.results.hostspan import WINDOW_COLUMNS, host_windows, runtimes_of, window_ios
from iobench.results.points import IDENTITY, PLACEMENT, parameter_columns
from iobench.results.steady import with_steady
from iobench.results.telemetry import with_telemetry
from iobench.results.timeseries import read_run_logs
from iobench.results.validity import with_validity
from iobench.store.inventory import DAMAGED, Inventory, SavedPoint, take_inventory
from iobench.store.records import Manifest, PointMeta, ProcessRecord
from iobench.store.rundir import RunDir
from iobench.store.untrusted import FIO_TEXT, read_text, run_of

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


def _unreadable(output: Path, exc: OSError | ResultsError) -> str:
    """Why a fio output cannot give rows, naming it: missing, empty, unreadable or not fio's."""
    if isinstance(exc, FileNotFoundError):
        return f"{output}: missing"
    if isinstance(exc, OSError):
        return f"{output}: cannot read: {exc.strerror}"
    try:
        if output.stat().st_size == 0:
            return f"{output}: empty"
    except OSError:
        pass
    return f"{output}: not fio output ({str(exc).removeprefix(f'{output}: ')})"


def host_shares(
    point_dir: Path, processes: list[ProcessRecord], parsed: Parsed, problems: list[str] | None = None
) -> Parsed:
    """Each host's rows of a fio client's output, keyed as :func:`parsed_key`; the output parsed once.

    A host's rows are those of its client (``client``: address and port, see
    :func:`~iobench.results.fioout.clients.client_key`) and of its job
    sections: with ``launch: per-target`` one host runs several job files
    through the same client. An output that cannot be parsed gives no rows;
    why (naming it) is appended to ``problems``.
    """
    shares: Parsed = {}
    by_output: dict[str, list[ProcessRecord]] = {}
    for process in processes:
        if process.client is not None and parsed_key(point_dir.name, process) not in parsed:
            by_output.setdefault(process.output, []).append(process)
    for name, group in by_output.items():
        output = point_dir / name
        try:
            text = read_text(output, FIO_TEXT, run_of(point_dir))
            clients = {client_key(p.client): str(p.host) for p in group if p.client}
            rows = client_rows(text, clients, origin=str(output))
        except (OSError, ResultsError) as exc:
            if problems is not None:
                problems.append(_unreadable(output, exc))
            continue
        except ValueError as exc:
            if problems is not None:
                problems.append(f"{output}: not fio output ({exc})")
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
    point_dir: Path, meta: PointMeta, process: ProcessRecord, parsed: Parsed, problems: list[str]
) -> tuple[list[Row], dict[str, list[Any]]] | None:
    """fio's rows of one process of a point, and the placement and settings columns iobench adds to them.

    None when the process left no rows; why, when its output cannot be read, is appended to ``problems``.
    """
    output = point_dir / process.output
    fio = parsed.get(parsed_key(point_dir.name, process))
    if fio is None:
        if process.client is not None:
            return None  # a host's share comes from host_shares, or not at all
        try:
            # Rows, not a frame per point: the run's frame is built once from every point's rows.
            text = read_text(output, FIO_TEXT, run_of(point_dir))
            fio = job_rows(read_jobs(text, origin=str(output)), process.output)
        except (OSError, ResultsError) as exc:
            problems.append(_unreadable(output, exc))
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
    """The rows of one saved point × repeat (one row without fio numbers when fio reported nothing).

    An ``ok`` point whose fio output cannot be read is ``damaged``: its
    numbers would be some of the point's, or none, and neither is the point's.
    """
    problems: list[str] = []
    known = {**parsed, **host_shares(point_dir, meta.processes, parsed, problems)}
    parts = [_process_rows(point_dir, meta, p, known, problems) for p in meta.processes]
    found = [p for p in parts if p is not None]
    silent = [p for p, part in zip(meta.processes, parts, strict=True) if part is None and p.host is not None]
    status: str = meta.status
    reason = meta.reason
    if status == "ok" and (problems or not meta.processes):
        status = DAMAGED
        reason = "; ".join(problems) or f"{point_dir / 'meta.json'}: an ok point without a fio process"
        found, silent = [], []
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
        "status": status,
        "reason": reason,
        "runtime_requested_ms": meta.runtime_requested_ms,
        # scheduler/readahead_kb of PLACEMENT: what the device had, read during the point
        **{name: value for name, value in meta.params.items() if name not in PLACEMENT},
    }
    for fio, columns in pieces:
        size = len(columns["host"])
        rows.add(fio, {**columns, **{name: [value] * size for name, value in point.items()}})


def _add_damaged(
    rows: _Rows, saved: SavedPoint, run_id: str, host: str | None, params: dict[str, Any]
) -> None:
    """One row for a point directory whose ``meta.json`` cannot be read: status ``damaged``, the reason."""
    point = {
        "run_id": run_id,
        "point": saved.point,
        "repeat": saved.repeat,
        "status": DAMAGED,
        "reason": saved.problem,
        "host": host,
        **{name: value for name, value in params.items() if name not in PLACEMENT},
    }
    rows.add(None, {name: [value] for name, value in point.items()})


def point_frame(
    point_dir: Path, meta: PointMeta, run_id: str, host: str | None, parsed: Parsed | None = None
) -> pd.DataFrame:
    """The rows of one saved point × repeat (one empty row when fio reported nothing)."""
    rows = _Rows()
    _add_point(rows, point_dir, meta, run_id, host, parsed or {})
    return rows.frame()


def with_hosts(frame: pd.DataFrame, run: RunDir, points: Sequence[tuple[Path, PointMeta]]) -> pd.DataFrame:
    """``frame`` with the ``hosts`` group's columns for its ``ok`` points that ran on hosts.

    :func:`with_host_window`, then ``host_outliers`` and
    ``host_outliers_detail`` on every row of a point × repeat × direction
    that ran on several hosts (:mod:`iobench.results.hostoutliers`).
    """
    frame = with_host_window(frame, run, points)
    if "window_s" not in frame:
        return frame
    judged = outliers(frame)
    if judged.empty:
        return frame
    by = [c for c in judged.columns if c not in OUTLIER_COLUMNS]
    found = pd.MultiIndex.from_frame(judged[by].astype(str)).get_indexer(
        pd.MultiIndex.from_frame(frame[by].astype(str))
    )
    for column in OUTLIER_COLUMNS:
        values = judged[column].array.take(found, allow_fill=True)
        frame[column] = pd.array(values, dtype="string")
    return frame


def with_host_window(
    frame: pd.DataFrame, run: RunDir, points: Sequence[tuple[Path, PointMeta]]
) -> pd.DataFrame:
    """``frame`` with ``window_s``, ``start_skew_ms``, ``overlap_pct`` and ``window_ios`` for points on hosts.

    The first three on every row of an ``ok`` point × repeat of ``points``
    that ran on hosts, ``window_ios`` on each of its job × direction rows
    (:mod:`iobench.results.hostspan`), from those points' logs only. A frame
    without such points is returned as it is.
    """
    on_hosts = [
        (d, m) for d, m in points if m.status == "ok" and any(p.host is not None for p in m.processes)
    ]
    if not on_hosts or frame.empty or "point" not in frame:
        return frame
    ok = frame["status"].eq("ok").fillna(False).to_numpy() if "status" in frame else np.ones(len(frame), bool)
    # fio's runtimes of each point's jobs, from its rows here: its output is not parsed twice.
    jobs = frame[ok & frame["direction"].notna().to_numpy()] if "direction" in frame else frame.iloc[0:0]
    runtimes = {
        (int(str(p)), int(str(r))): runtimes_of(rows)
        for (p, r), rows in jobs.dropna(subset=["point", "repeat"]).groupby(["point", "repeat"], sort=False)
    }
    logs = read_run_logs(run, on_hosts, runtimes)
    windows = host_windows(logs.spans)
    keys = pd.MultiIndex.from_arrays([windows["point"].astype("Int64"), windows["repeat"].astype("Int64")])
    at = keys.get_indexer(pd.MultiIndex.from_arrays([frame["point"], frame["repeat"]]))
    at = np.where(ok, at, -1)
    for column in WINDOW_COLUMNS:
        # a trailing NaN for the rows of no window (also when no point has logs to window)
        values = np.append(windows[column].to_numpy(dtype=float), np.nan)
        frame[column] = pd.array(values[np.where(at >= 0, at, -1)], dtype="Float64")
        frame.loc[at < 0, column] = pd.NA
    data = (at >= 0) & frame["direction"].notna().to_numpy()
    series = logs.series[logs.series["metric"].eq("iops")]
    log_window = {
        (int(p), int(r)): float(w)
        for p, r, w in logs.timing[["point", "repeat", "window_s"]].itertuples(index=False, name=None)
    }
    counted = np.full(len(frame), np.nan)
    counted[data] = window_ios(frame[data], series, logs.spans, windows, log_window)
    frame["window_ios"] = pd.array(counted, dtype="Float64")
    frame.loc[~data, "window_ios"] = pd.NA
    return frame


def _tidy_types(frame: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """Each column in its schema dtype; an axis gets the type of its values."""
    for column in frame.columns:
        if column in axes or column not in schema.BY_NAME:
            continue
        wanted = schema.dtype(column)
        if str(frame[column].dtype) == wanted:
            continue
        if wanted == "Int64":
            frame[column] = frame[column].astype("Float64").round().astype("Int64")
        else:
            frame[column] = frame[column].astype(pd.api.types.pandas_dtype(wanted))
    for column in axes:
        kinds = {type(v) for v in frame[column].dropna()}
        if kinds <= {int, bool} and kinds:
            frame[column] = frame[column].astype("Int64")
        elif kinds <= {int, float} and kinds:
            frame[column] = frame[column].astype("Float64")
        else:
            frame[column] = frame[column].astype("string")
    return frame


class BuiltFrom(str):
    """What a frame was built from: each point directory's stamp, the schema, and notes made on the way.

    Kept in the frame's ``attrs`` (:data:`BUILT_FROM`) for the cache that
    saves it. It is a string (JSON) that is never copied: pandas deep-copies
    ``attrs`` at every operation and writes them into parquet files as JSON,
    and a dict of thousands of stamps would cost both.
    """

    __slots__ = ()

    @classmethod
    def of(
        cls, stamps: dict[str, str], schema_print: str | None = None, notes: Sequence[str] = ()
    ) -> BuiltFrom:
        """The record of ``stamps`` (:meth:`Inventory.stamps <iobench.store.inventory.Inventory.stamps>`)."""
        data = {"schema": schema_print or schema.fingerprint(), "points": stamps, "notes": list(notes)}
        return cls(json.dumps(data, separators=(",", ":")))

    def _data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self)
        return data

    @property
    def stamps(self) -> dict[str, str]:
        """Each point directory's name and stamp."""
        return dict(self._data()["points"])

    @property
    def schema(self) -> str:
        """The schema's fingerprint (:func:`iobench.results.schema.fingerprint`)."""
        return str(self._data()["schema"])

    @property
    def notes(self) -> tuple[str, ...]:
        """Supporting files that could not be read, each naming the file."""
        return tuple(str(n) for n in self._data()["notes"])

    def with_notes(self, notes: Sequence[str]) -> BuiltFrom:
        """The same record with ``notes`` added."""
        data = self._data()
        return BuiltFrom.of(data["points"], data["schema"], [*data["notes"], *notes])

    def __deepcopy__(self, memo: dict[int, Any]) -> BuiltFrom:
        return self


#: The ``attrs`` key of a frame's :class:`BuiltFrom`.
BUILT_FROM = "iobench_built_from"


def _sibling_params(inventory: Inventory) -> dict[int, dict[str, Any]]:
    """Each point number's parameters, from its first readable repeat (for repeats that lost their record)."""
    params: dict[int, dict[str, Any]] = {}
    for _, meta in inventory.readable():
        params.setdefault(meta.point, meta.params)
    return params


def _base_frame(run: RunDir, parsed: Parsed, inventory: Inventory) -> pd.DataFrame:
    """The tidy frame of every point directory of ``run`` before the telemetry and steady-state columns are added."""
    manifest = run.manifest()
    run_id = run.path.name
    host = manifest.machine.host
    rows, axes = _Rows(), []
    siblings = _sibling_params(inventory) if inventory.damaged() else {}
    for saved in inventory.points:
        if saved.meta is None:
            params = siblings.get(saved.point, {}) if saved.point is not None else {}
            _add_damaged(rows, saved, run_id, host, params)
            continue
        meta = saved.meta
        _add_point(rows, saved.path, meta, run_id, host, parsed)
        axes += [a for a in meta.params if a not in axes and a not in PLACEMENT and a not in IDENTITY]
    if not rows.size:
        frame = pd.DataFrame({c: pd.Series([], dtype=schema.dtype(c)) for c in IDENTITY})
    else:
        frame = _tidy_types(rows.frame(), axes)
        frame = _ordered(with_hosts(frame, run, list(inventory.readable())), axes, manifest)
    frame.attrs[BUILT_FROM] = BuiltFrom.of(inventory.stamps())
    return frame


def build_frame(
    run: RunDir,
    parsed: Parsed | None = None,
    *,
    inventory: Inventory | None = None,
) -> pd.DataFrame:
    """Assemble the tidy frame from every point directory of ``run`` (``parsed`` spares re-reading outputs).

    ``inventory``: the points, already listed (:func:`~iobench.store.inventory.take_inventory`).
    Supporting files that cannot be read (telemetry, fio's logs) leave NA in
    their columns with the reason there; they are also listed in
    the notes of ``attrs[BUILT_FROM]``.
    """
    inventory = inventory.with_records() if inventory is not None else take_inventory(run)
    frame = _base_frame(run, parsed or {}, inventory)
    found = frame.attrs.get(BUILT_FROM)
    built = found if isinstance(found, BuiltFrom) else BuiltFrom.of(inventory.stamps())
    if "point" not in frame or frame.empty:
        return frame
    manifest = run.manifest()
    axes = parameter_columns(frame)  # the matrix's axes, in the order _base_frame put them
    points = list(inventory.readable())
    notes: list[str] = []
    frame = with_steady(
        with_telemetry(frame, run, points=points, notes=notes), run, points=points, notes=notes
    )
    frame = _ordered(with_validity(frame, run, points), axes, manifest)
    frame.attrs[BUILT_FROM] = built.with_notes(notes)
    return frame


def _ordered(frame: pd.DataFrame, axes: list[str], manifest: Manifest) -> pd.DataFrame:
    """The schema's order, the matrix's axes after the identity columns; then anything else (never ``source``)."""
    identity = schema.group("identity")
    rest = [c for c in schema.FRAME if c not in identity]
    order = [c for c in (*identity, *axes, *rest) if c in frame]
    others = [c for c in frame.columns if c not in order and c != "source"]
    return with_machine(frame[order + others], manifest)


def with_machine(frame: pd.DataFrame, manifest: Manifest) -> pd.DataFrame:
    """Carry the machine facts (host, kernel, CPU model, versions) in ``frame.attrs["machine"]`` for captions."""
    frame.attrs["machine"] = {
        k: v for k, v in manifest.machine.facts().items() if k not in ("topology", "targets", "system")
    }
    if manifest.hosts:  # fio ran on these machines, not on the client that wrote `machine`
        frame.attrs["hosts"] = [
            {k: v for k, v in h.items() if k not in ("topology", "targets")} for h in manifest.hosts
        ]
        for key in ("cpu_model", "kernel"):
            found = dict.fromkeys(str(h.get(key)) for h in manifest.hosts if h.get(key))
            frame.attrs["machine"][key] = ", ".join(found)
    return frame
