"""Saved points → the tidy frame of SPEC §6, and :func:`load` for notebooks."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from iobench.errors import ResultsError, RunStorageError
from iobench.results.fioout import parse_fio_text
from iobench.results.fioout.clients import client_key, parse_client_output
from iobench.results.fioout.frame import FRAME_METRICS
from iobench.results.points import EXTRA, IDENTITY, PLACEMENT, STEADY, TELEMETRY, parameter_columns
from iobench.results.steady import with_steady
from iobench.results.telemetry import with_telemetry
from iobench.store.records import FRAME_VERSION, Manifest, PointMeta, ProcessRecord
from iobench.store.rundir import RunDir

Parsed = dict[str, pd.DataFrame]
"""fio outputs already parsed during the run, keyed ``<point key>/<output file>``."""


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
            frame = parse_client_output(text, clients, origin=str(output))
        except (OSError, ValueError, ResultsError):
            continue
        for p in group:
            mine = frame["host"].eq(str(p.host)) & frame["jobname"].isin(p.sections)
            shares[parsed_key(point_dir.name, p)] = frame[mine.fillna(False)].reset_index(drop=True)
    return shares


def _process_rows(
    point_dir: Path, meta: PointMeta, process: ProcessRecord, parsed: Parsed
) -> pd.DataFrame | None:
    output = point_dir / process.output
    cached = parsed.get(parsed_key(point_dir.name, process))
    if cached is not None:
        frame = cached.copy()
    elif not output.is_file() or process.client is not None:
        return None  # a host's share comes from host_shares, or not at all
    else:
        try:
            frame = parse_fio_text(output.read_text(errors="replace"), origin=str(output))
        except ResultsError:
            return None
    if frame.empty:
        return None
    sections = dict(zip(process.sections, process.targets, strict=True))
    frame["target"] = frame["jobname"].map(sections).astype("string")
    frame["target_node"] = process.target_node
    frame["cpu_node"] = process.cpu_node
    frame["cpus"] = process.cpus
    frame["cpus_observed"] = _observed_per_job(frame, process)
    settings = meta.settings
    disks = process.target_disks
    for column in ("scheduler", "readahead_kb"):
        frame[column] = [
            next((settings.get(d, {}).get(column) for d in disks.get(t, []) if d in settings), None)
            for t in frame["target"].fillna("")
        ]
    return frame


def _observed_per_job(frame: pd.DataFrame, process: ProcessRecord) -> list[Any]:
    """Each row's worker CPUs when fio's workers map one-to-one onto its jobs, else the union."""
    workers = [o for o in process.observed if not o.leader]
    jobs = sorted(frame["job_index"].dropna().unique())
    if workers and len(workers) == len(jobs):
        by_job = {job: w.cpus for job, w in zip(jobs, workers, strict=True)}
        return [by_job.get(j, process.cpus_observed) for j in frame["job_index"]]
    return [process.cpus_observed] * len(frame)


def _empty_row(processes: list[ProcessRecord]) -> pd.DataFrame:
    if not processes:
        return pd.DataFrame([{"target": None}])
    # One row per host where a point ran on hosts, so each host's failure shows under its name.
    chosen = processes if processes[0].host is not None else processes[:1]
    return pd.DataFrame(
        [
            {
                "target": process.targets[0] if len(process.targets) == 1 else None,
                "target_node": process.target_node,
                "cpu_node": process.cpu_node,
                "cpus": process.cpus,
                "cpus_observed": process.cpus_observed,
                "host": process.host,
            }
            for process in chosen
        ]
    )


def point_frame(
    point_dir: Path, meta: PointMeta, run_id: str, host: str | None, parsed: Parsed | None = None
) -> pd.DataFrame:
    """The rows of one saved point × repeat (one empty row when fio reported nothing)."""
    known = {**(parsed or {}), **host_shares(point_dir, meta.processes, parsed or {})}
    parts = [_process_rows(point_dir, meta, p, known) for p in meta.processes]
    found = [p for p in parts if p is not None]
    silent = [p for p, part in zip(meta.processes, parts, strict=True) if part is None and p.host is not None]
    if found and silent:  # hosts that reported nothing keep a row each, as a job without I/O does
        found.append(_empty_row(silent))
    frame = pd.concat(found, ignore_index=True) if found else _empty_row(meta.processes)
    frame["run_id"] = run_id
    frame["point"] = meta.point
    frame["repeat"] = meta.repeat
    frame["status"] = meta.status
    frame["reason"] = meta.reason
    frame["runtime_requested_ms"] = meta.runtime_requested_ms
    if "host" not in frame or frame["host"].isna().all():
        frame["host"] = host
    for name, value in meta.params.items():
        if name not in PLACEMENT:  # scheduler/readahead_kb: what the device had, read during the point
            frame[name] = value
    return frame


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
    frames, axes = [], []
    for point_dir, meta in run.point_metas():
        frames.append(point_frame(point_dir, meta, run_id, host, parsed))
        axes += [a for a in meta.params if a not in axes and a not in PLACEMENT and a not in IDENTITY]
    if not frames:
        return pd.DataFrame({c: pd.Series([], dtype="object") for c in IDENTITY})
    return _ordered(_tidy_types(pd.concat(frames, ignore_index=True), axes), axes, manifest)


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
