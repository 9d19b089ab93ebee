"""A matrix's history: every run joins its series, and each series' change points are explained.

A **store** is a folder of Parquet files (docs/history.md): ``iobench-history.json`` says what
it is, ``keys.txt`` lists the runs it holds, and each add writes one file of rows under
``parts/``; parts are merged into ``segments/`` and segments into ``base.parquet`` as they
accumulate, so a read opens a bounded number of files. Adds hold an exclusive ``flock`` on
``lock`` and reads a shared one: concurrent adds queue, and a reader sees whole adds only.

A **series** is what must stay the same for numbers to be comparable: the point's workload
(its parameters, the matrix's fio options and targets), the device's identity (model,
capacity, logical block size — not firmware), the machine's hardware (CPU model, NUMA nodes,
cores, CPUs, memory), the host (its name under ``hosts:``; this machine is ``""``) and the
direction. What may change between runs — kernel, firmware, fio, iobench, the device's
settings, ``iobench system show`` — is recorded per run as **events**, never keyed; volatile
readings (the hostname) are stored, never keyed or used as explanations.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from iobench.answers.changepoints import change_points, noise
from iobench.errors import HistoryError, IobenchError
from iobench.store.atomic import atomic_replacing, atomic_write, fsync_directory
from iobench.version import __version__

FORMAT = "iobench-history"
VERSION = 1
MARKER = "iobench-history.json"
# The metrics whose change points are looked for: frame column -> the summary's column.
METRICS = {
    "iops": "iops_mean",
    "bw_bytes": "bw_bytes_mean",
    "lat_mean_us": "lat_mean_us_mean",
    "clat_p99_us": "clat_p99_us_mean",
}
# A change smaller than this many times a series' run-to-run noise is never reported.
NOISE_FACTOR = 3.0
# Parts are merged into a segment, and segments into the base, when this many have gathered.
PARTS_PER_SEGMENT = 64
SEGMENTS_PER_BASE = 32
_ROW_COLUMNS = ["run_key", "run_id", "started", "series", "point", "host", "direction", "n"]


@dataclass(frozen=True)
class RunRows:
    """One run's rows for a store: ``key`` identifies the run wherever its folder lies."""

    key: str
    run_id: str
    matrix: str
    rows: pd.DataFrame


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _digest(value: Any, length: int = 16) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()[:length]


def _machine_key(machine: Mapping[str, Any]) -> dict[str, Any]:
    topology = machine.get("topology") or {}
    nodes = topology.get("nodes") or []
    return {
        "cpu_model": machine.get("cpu_model"),
        "nodes": len(nodes),
        "cores": len(topology.get("cores") or []),
        "cpus": sum(len(node.get("cpus") or []) for node in nodes) or machine.get("cpu_count"),
        "memory_gib": machine.get("memory_gib"),
    }


def _disks(machine: Mapping[str, Any], target: str) -> list[dict[str, Any]]:
    for spec in machine.get("targets") or []:
        if spec.get("path") == target:
            return [dict(disk) for disk in spec.get("disks") or []]
    return []


def _target_spec(machine: Mapping[str, Any], target: str) -> dict[str, Any]:
    for spec in machine.get("targets") or []:
        if spec.get("path") == target:
            return {"path": target, "size": spec.get("size"), "kind": spec.get("kind")}
    return {"path": target}


def _events(
    machine: Mapping[str, Any], disks: list[dict[str, Any]], row: Mapping[str, Any]
) -> dict[str, str]:
    """What may change between runs of one series, each as ``name -> value`` text."""
    events = {
        "kernel": machine.get("kernel"),
        "fio": machine.get("fio_version"),
        "iobench": machine.get("iobench_version"),
        "numactl": machine.get("numactl_version"),
        "scheduler": row.get("scheduler"),
        "readahead_kb": row.get("readahead_kb"),
    }
    for disk in disks:
        events[f"firmware {disk.get('name')}"] = disk.get("firmware")
    for setting in machine.get("system") or []:
        events[f"system {setting.get('name')}"] = setting.get("value")
    return {name: str(value) for name, value in events.items() if value is not None and not _isna(value)}


def _isna(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _point_label(row: Mapping[str, Any], params: Sequence[str]) -> str:
    from iobench.matrix.display import format_value

    return " ".join(f"{name}={format_value(name, row[name])}" for name in params if not _isna(row.get(name)))


def run_rows(run: str | os.PathLike[str]) -> RunRows:
    """A run directory's rows for a store, or :class:`HistoryError` saying why it cannot join one.

    A run joins only when it is complete (every planned point saved, the manifest finished)
    and nothing in it is damaged; its numbers are each point's means over its repeats
    (:func:`iobench.summarize`), per host for a run on ``hosts:``.
    """
    from iobench.results.loading import load
    from iobench.results.points import summarize
    from iobench.store.rundir import RunDir

    folder = Path(run)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            frame = load(folder)
        manifest = RunDir.open(folder).manifest()
    except IobenchError as err:
        raise HistoryError(f"{folder}: cannot be read: {err}") from None
    state = frame.attrs.get("run") or {}
    if not state.get("complete"):
        raise HistoryError(
            f"{folder}: the run is not complete ({state.get('done', 0)} of {state.get('planned', '?')} "
            f"points saved, status {state.get('status')!r}); finish it with `iobench run --resume` first"
        )
    damaged = frame[frame["status"].eq("damaged").fillna(False)] if "status" in frame else frame.iloc[:0]
    if not damaged.empty:
        reasons = "; ".join(sorted({str(r) for r in damaged["reason"].fillna("?")})[:3])
        raise HistoryError(
            f"{folder}: {len(damaged)} damaged point row(s) ({reasons}); repair or re-run them first"
        )
    on_hosts = bool(manifest.hosts)
    summary = summarize(frame, by=["host"] if on_hosts else None)
    if summary.empty:
        raise HistoryError(f"{folder}: no point finished ok, so the run has no numbers to add")
    machine = manifest.machine.facts()
    hosts = {str(h.get("name") or h.get("host")): h for h in manifest.hosts}
    fio_options = _matrix_fio(folder)
    params = [c for c in summary.columns if c in _params(folder, frame)]
    run_key = _digest(
        {
            "run_id": frame["run_id"].iloc[0],
            "started": manifest.started,
            "matrix": manifest.matrix_fingerprint,
        }
    )
    rows = []
    for entry in summary.to_dict("records"):
        record = {str(name): value for name, value in entry.items()}
        host = str(record.get("host") or "") if on_hosts else ""
        facts = hosts.get(host, machine) if on_hosts else machine
        target = str(record.get("target") or "")
        disks = _disks(facts, target)
        key = {
            "workload": {
                "params": {name: record.get(name) for name in params},
                "fio": fio_options,
                "target": _target_spec(facts, target),
            },
            "device": [
                {
                    "model": d.get("model"),
                    "size_bytes": d.get("size_bytes"),
                    "lba": d.get("logical_block_size"),
                }
                for d in disks
            ],
            "machine": _machine_key(facts),
            "host": host,
            "direction": record.get("direction"),
        }
        row = {
            "run_key": run_key,
            "run_id": str(record["run_id"]),
            "started": manifest.started or "",
            "series": _digest(key),
            "point": _point_label(record, params),
            "host": host,
            "direction": str(record.get("direction")),
            "n": int(record.get("n") or 0),
            "key": _canonical(key),
            "events": _canonical(_events(facts, disks, record)),
            "volatile": _canonical({"hostname": facts.get("host"), "os": facts.get("os")}),
        }
        for metric, column in METRICS.items():
            value = record.get(column)
            row[metric] = float(value) if value is not None and not _isna(value) else math.nan
        rows.append(row)
    return RunRows(run_key, str(frame["run_id"].iloc[0]), manifest.name, pd.DataFrame(rows))


def _params(folder: Path, frame: pd.DataFrame) -> set[str]:
    from iobench.store.rundir import RunDir

    names: set[str] = set()
    with contextlib.suppress(IobenchError, OSError):
        for _, meta in RunDir(folder).point_metas():
            names |= set(meta.params)
            break
    return names or {c for c in ("bs", "iodepth", "numjobs", "rw", "binding", "placement") if c in frame}


def _matrix_fio(folder: Path) -> dict[str, Any]:
    """The matrix's fixed fio options as the run saved them (``{}`` when the copy is unreadable)."""
    from iobench.matrix.yamlsource import load_yaml

    try:
        with open(folder / "matrix.yaml", "rb") as handle:
            text = handle.read(1 << 20).decode()
        data, _ = load_yaml(text)
    except (OSError, UnicodeDecodeError, IobenchError, ValueError):
        return {}
    fio = data.get("fio") if isinstance(data, dict) else None
    return {str(k): v for k, v in fio.items()} if isinstance(fio, dict) else {}


class Store:
    """A history store's folder; :func:`open_store` checks it is one before anything else."""

    def __init__(self, folder: Path, matrix: str | None) -> None:
        self.folder = folder
        self.matrix = matrix

    @contextlib.contextmanager
    def locked(self, exclusive: bool) -> Iterator[None]:
        fd = os.open(self.folder / "lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    def keys(self) -> set[str]:
        try:
            with open(self.folder / "keys.txt", encoding="ascii") as handle:
                return {line.strip() for line in handle if line.strip()}
        except FileNotFoundError:
            return set()

    def files(self) -> list[Path]:
        """Every rows file, the merged ones first (their rows win over a part's after a crash)."""
        found = [self.folder / "base.parquet"] if (self.folder / "base.parquet").is_file() else []
        for sub in ("segments", "parts"):
            found += sorted((self.folder / sub).glob("*.parquet"))
        return found


def _marker(folder: Path) -> dict[str, Any] | None:
    try:
        with open(folder / MARKER, encoding="utf-8") as handle:
            data = json.loads(handle.read(1 << 16))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise HistoryError(f"{folder}: {MARKER} cannot be read ({err}): not a history store") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise HistoryError(f"{folder}: {MARKER} does not describe a history store")
    return data


def open_store(store: str | os.PathLike[str], *, create: bool = False) -> Store:
    """The store at ``store``; with ``create``, a new one in a missing or empty folder.

    Raises :class:`HistoryError` for a folder that is not a store (and not empty), a store
    written by a newer iobench, or a missing store without ``create``.
    """
    folder = Path(store)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise HistoryError(f"{folder}: not a folder, so not a history store")
    marker = _marker(folder) if folder.is_dir() else None
    if marker is None:
        if folder.is_dir() and any(folder.iterdir()):
            raise HistoryError(
                f"{folder}: not a history store (no {MARKER}) and not empty; give a new or empty folder"
            )
        if not create:
            raise HistoryError(
                f"{folder}: no history store here; `iobench history add --store {folder}` makes one"
            )
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(
            folder / MARKER, _canonical({"format": FORMAT, "version": VERSION, "matrix": None}) + "\n"
        )
        return Store(folder, None)
    version = marker.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise HistoryError(
            f"{folder}: written by a newer iobench (store version {version!r}; this iobench "
            f"{__version__} reads up to {VERSION}); upgrade iobench to use it"
        )
    matrix = marker.get("matrix")
    return Store(folder, matrix if isinstance(matrix, str) else None)


def check_store(store: str | os.PathLike[str], matrix: str) -> None:
    """Raise :class:`HistoryError` now if runs of ``matrix`` could not be added to ``store`` later
    (not a store, a newer one, another matrix's); a missing or empty folder is fine. Changes nothing."""
    folder = Path(store)
    if not folder.exists() or (folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir())):
        return
    held = open_store(folder).matrix
    if held is not None and held != matrix:
        raise HistoryError(
            f"{folder}: a store holds one matrix's history ({held!r}); this run is of {matrix!r}; use another store"
        )


def _write_rows(path: Path, frame: pd.DataFrame) -> None:
    with atomic_replacing(path) as tmp:
        frame.to_parquet(tmp, index=False)


def _read_rows(paths: Sequence[Path], series: str | None = None) -> pd.DataFrame:
    import pyarrow.dataset as ds

    if not paths:
        return pd.DataFrame(columns=[*_ROW_COLUMNS, *METRICS, "key", "events", "volatile"])
    dataset = ds.dataset([str(p) for p in paths], format="parquet")
    table = dataset.to_table(filter=ds.field("series") == series if series else None)
    frame: pd.DataFrame = table.to_pandas()
    return frame.drop_duplicates(["run_key", "series"], keep="first").reset_index(drop=True)


def _merge(store: Store) -> None:
    parts = sorted((store.folder / "parts").glob("*.parquet"))
    if len(parts) >= PARTS_PER_SEGMENT:
        (store.folder / "segments").mkdir(exist_ok=True)
        _write_rows(store.folder / "segments" / f"{parts[0].stem}.parquet", _read_rows(parts))
        for part in parts:
            part.unlink()
    segments = sorted((store.folder / "segments").glob("*.parquet"))
    if len(segments) >= SEGMENTS_PER_BASE:
        base = store.folder / "base.parquet"
        _write_rows(base, _read_rows(([base] if base.is_file() else []) + segments))
        for segment in segments:
            segment.unlink()
    fsync_directory(store.folder)


def add_rows(store: str | os.PathLike[str], runs: Iterable[RunRows]) -> list[str]:
    """Add runs' rows to ``store`` (made when missing) in one part; returns the keys added.

    A run the store holds already is left out, so adding twice changes nothing. Every run
    must be of the store's matrix (by name), else nothing is added.
    """
    handle = open_store(store, create=True)
    with handle.locked(exclusive=True):
        handle = open_store(store)  # another add may have named the matrix meanwhile
        batch = list(runs)
        matrices = {r.matrix for r in batch}
        if handle.matrix is not None:
            matrices.add(handle.matrix)
        if len(matrices) > 1:
            others = ", ".join(
                sorted(f"{r.run_id} ({r.matrix!r})" for r in batch if r.matrix != handle.matrix)
            )
            raise HistoryError(
                f"{handle.folder}: a store holds one matrix's history "
                f"({handle.matrix or sorted(matrices)[0]!r}); not added: {others}; use another store"
            )
        if handle.matrix is None and batch:
            atomic_write(
                handle.folder / MARKER,
                _canonical({"format": FORMAT, "version": VERSION, "matrix": batch[0].matrix}) + "\n",
            )
        held = handle.keys()
        new = {r.key: r for r in batch if r.key not in held}
        if not new:
            return []
        (handle.folder / "parts").mkdir(exist_ok=True)
        rows = pd.concat([r.rows for r in new.values()], ignore_index=True)
        _write_rows(handle.folder / "parts" / f"{_digest(sorted(new))}.parquet", rows)
        # The keys follow the rows: after a crash between the two, adding the run again
        # rewrites the same part and the reader keeps one copy of each run's rows.
        with open(handle.folder / "keys.txt", "a", encoding="ascii") as keys:
            keys.write("".join(f"{key}\n" for key in new))
            keys.flush()
            os.fsync(keys.fileno())
        _merge(handle)
        return list(new)


def add(store: str | os.PathLike[str], runs: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Add run directories to a history store; returns the run ids added (not those held already).

    Every run is checked first: when any cannot join (incomplete, damaged, another matrix's),
    :class:`HistoryError` names each and nothing is added.
    """
    collected, refused = [], []
    for run in runs:
        try:
            collected.append(run_rows(run))
        except HistoryError as err:
            refused.append(str(err))
    if refused:
        raise HistoryError("nothing was added:\n" + "\n".join(f"  {r}" for r in refused))
    keys = set(add_rows(store, collected))
    return [r.run_id for r in collected if r.key in keys]


def load(store: str | os.PathLike[str], *, series: str | None = None) -> pd.DataFrame:
    """The store's rows: one per run × point × host × direction, oldest run first.

    Columns: ``run_key``, ``run_id``, ``started``, ``series``, ``point``, ``host``,
    ``direction``, ``n`` (repeats), the metrics (``iops``, ``bw_bytes``, ``lat_mean_us``,
    ``clat_p99_us``: means over the run's repeats), ``key`` (what the series is, as JSON),
    ``events`` and ``volatile`` (JSON). ``series`` reads one series only.
    """
    handle = open_store(store)
    with handle.locked(exclusive=False):
        frame = _read_rows(handle.files(), series)
    return frame.sort_values(["started", "run_id"], kind="stable").reset_index(drop=True)


def _explain(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    moved = [
        f"{name} {before.get(name, '–')} → {after.get(name, '–')}"
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name)
    ]
    return "; ".join(moved)


def _series_changes(rows: pd.DataFrame, metric: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = rows[np.isfinite(rows[metric].to_numpy(dtype=float))]
    values = rows[metric].to_numpy(dtype=float)
    spread = noise(values)
    floor = NOISE_FACTOR * spread if math.isfinite(spread) else math.inf
    first = rows.iloc[0] if len(rows) else None
    summary = {
        "series": first["series"] if first is not None else None,
        "point": first["point"] if first is not None else None,
        "host": first["host"] if first is not None else None,
        "direction": first["direction"] if first is not None else None,
        "metric": metric,
        "runs": len(values),
        "noise_pct": 100 * spread,
        "smallest_change_pct": 100 * floor,
    }
    found = []
    if len(values) >= 6 and math.isfinite(floor):
        events = [json.loads(e) for e in rows["events"]]
        for cp in change_points(values, min_magnitude=floor):
            found.append(
                {
                    "series": summary["series"],
                    "point": summary["point"],
                    "host": summary["host"],
                    "direction": summary["direction"],
                    "metric": metric,
                    "run_id": rows["run_id"].iloc[cp.index],
                    "before": cp.before,
                    "after": cp.after,
                    "change_pct": 100 * cp.change,
                    "p_value": cp.pvalue,
                    "noise_pct": 100 * spread,
                    "explained_by": _explain(events[cp.index - 1], events[cp.index]),
                }
            )
    return found, summary


def _by_series(store: str | os.PathLike[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    frame = load(store)
    for name, rows in frame.groupby("series", sort=True):
        yield str(name), rows


_CHANGE_COLUMNS = [
    "series", "point", "host", "direction", "metric", "run_id",
    "before", "after", "change_pct", "p_value", "noise_pct", "explained_by",
]  # fmt: skip


def changes(store: str | os.PathLike[str]) -> pd.DataFrame:
    """Every change point of every series × metric, the unexplained first, then the largest.

    Columns: ``series``, ``point``, ``host``, ``direction``, ``metric``, ``run_id`` (the
    first run after the change), ``before``/``after`` (the means of the runs on either side,
    to the neighbouring change points), ``change_pct``, ``p_value`` (Welch's test),
    ``noise_pct`` (the series' run-to-run noise) and ``explained_by`` (what changed between
    the run before and ``run_id``: ``"kernel 6.1.0 → 6.6.0"``; empty when nothing recorded
    did). See :mod:`iobench.answers.changepoints` for the rule.
    """
    found = []
    for _, rows in _by_series(store):
        for metric in METRICS:
            found += _series_changes(rows, metric)[0]
    table = pd.DataFrame(found, columns=_CHANGE_COLUMNS)
    if table.empty:
        return table
    table["_explained"] = table["explained_by"] != ""
    table["_size"] = -table["change_pct"].abs()
    return (
        table.sort_values(["_explained", "_size"], kind="stable")
        .drop(columns=["_explained", "_size"])
        .reset_index(drop=True)
    )


def noise_table(store: str | os.PathLike[str]) -> pd.DataFrame:
    """Each series × metric: ``runs``, ``noise_pct`` (run-to-run) and ``smallest_change_pct``,
    the smallest change it reports (three times its noise)."""
    return pd.DataFrame(
        [_series_changes(rows, metric)[1] for _, rows in _by_series(store) for metric in METRICS]
    )
