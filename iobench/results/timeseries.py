"""fio's own logs of every point, over time, in one long frame: :func:`timeseries`.

Every point writes fio's bandwidth, IOPS and latency logs, one file per job
section, kind and job (:mod:`iobench.planner.timelogs`). A log line is
``time_ms, value, ddir, bs[, offset], prio``; iobench reads the first three
fields. The frame has one row per log line that carries a measurement:

==============  ===============================================================================
column          meaning
==============  ===============================================================================
``point``       the point and repeat (``0003-r2`` is point 3, repeat 2)
``repeat``
``host``        the machine that ran the job: a host's name (logs fio's client brought back
                as ``<log>.host-<name>``), else this machine's
``jobname``     the job section (named after the target) whose logs these are
``job``         fio's job number within its fio process (1..N); with ``per_job_logs=0`` a
                section's jobs share one file and are numbered in the order fio wrote them
``direction``   ``read``, ``write`` or ``trim`` (fio's ddir 0, 1, 2)
``window``      ``t_s / log_avg_msec``, rounded: the window the row belongs to, so the
                windows of several jobs line up (their clocks differ by milliseconds)
``t_s``         fio's time stamp in seconds: the end of the window, counted from the start of
                the measured time (fio restarts its clock when ``ramp_time`` ends, so the
                ramp is never in the logs); on hosts, from the start of the point's
                earliest host (their logs are in Unix time: :mod:`iobench.results.hostspan`)
``metric``      ``iops``, ``bw_bytes`` (bytes/s; fio logs KiB/s), ``lat_mean_us``,
                ``clat_mean_us``, ``slat_mean_us`` (µs; fio logs ns): the mean over the window.
                With ``log_max_value=1`` fio logs each window's largest value instead, and the
                names say so: ``iops_max``, ``bw_bytes_max``, ``lat_max_us``, ...
``value``       in the metric's unit
==============  ===============================================================================

plus the point's parameter columns (its matrix axes), as in the tidy frame.

What fio's windowed logs do, and what iobench makes of it:

- fio writes an IOPS or bandwidth sample when a window has passed, as the rate
  over the time since its previous sample; a window without I/O has no
  sample. It may miss the last (partial) window of a job altogether.
- Latency logs write a window's mean when its first I/O after the window's
  end completes, and the last, shorter window when the job ends: that one is kept.
- A time stamp that repeats within a job, direction and metric covers no time
  (fio logs a rate of 0 for it, or the mean of the last few I/Os of a window
  already written): only the first row is kept.
- With ``per_job_logs=0`` the jobs of a section append to one file one after
  another; where the time stamps start again, the next job begins.
- A point on hosts logs in Unix time, each host on its own clock: every job's
  start and end are found (:func:`iobench.results.hostspan.job_spans`) and
  the point's time counted from the earliest start, so the windows of all
  hosts line up. The spans are in ``RunLogs.spans``.

Only points with status ``ok`` are read. Parsing is vectorised: every log
file of a run is read into one buffer and parsed by pandas' C reader in one
call (docs/timeseries.md has the speed next to the JSON parse).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from iobench.errors import ResultsError
from iobench.matrix.units import parse_seconds
from iobench.planner.timelogs import DEFAULT_LOG_AVG_MSEC, EPOCH_OPTIONS, LOG_FILE
from iobench.results.hostspan import SPAN_COLUMNS, client_hosts, host_runtimes, job_spans, runtimes_of
from iobench.results.points import PLACEMENT
from iobench.store.inventory import take_inventory
from iobench.store.records import PointMeta
from iobench.store.rundir import RunDir
from iobench.store.untrusted import FIO_LOG, FIO_TEXT, read_bytes, read_text, run_of

#: The long frame's columns before the parameter columns.
COLUMNS: tuple[str, ...] = (
    "point",
    "repeat",
    "host",
    "jobname",
    "job",
    "direction",
    "window",
    "t_s",
    "metric",
    "value",
)
DIRECTIONS: tuple[str, ...] = ("read", "write", "trim")
#: Per log kind: the metric (window mean), the metric with ``log_max_value=1``, the factor to its unit.
KINDS: dict[str, tuple[str, str, float]] = {
    "iops": ("iops", "iops_max", 1.0),
    "bw": ("bw_bytes", "bw_bytes_max", 1024.0),
    "lat": ("lat_mean_us", "lat_max_us", 1e-3),
    "clat": ("clat_mean_us", "clat_max_us", 1e-3),
    "slat": ("slat_mean_us", "slat_max_us", 1e-3),
}
_KIND_CODE = {kind: i for i, kind in enumerate(KINDS)}
_METRICS = np.array([names[m] for names in KINDS.values() for m in (0, 1)], dtype=object)
_FACTORS = np.array([f for _, _, f in KINDS.values() for _ in (0, 1)])
#: Columns of the per point × repeat timing table (``attrs["timing"]`` of the long frame).
TIMING: tuple[str, ...] = (
    "point",
    "repeat",
    "window_s",
    "ramp_s",
    "steadystate_ramp_s",
    "steadystate_s",
    "steadystate",
)


@dataclass(frozen=True)
class _File:
    """One log file and what its name and its point say about it."""

    path: str
    index: int  # the point × repeat, a row of the timing table
    host: str | None  # the host whose server wrote it; None: this machine
    section: str
    kind: str
    job: int | None
    window_ms: int
    max_value: bool


def _truthy(text: str | None) -> bool:
    return (text or "").strip().lower() in ("1", "true", "yes", "on")


def _seconds(text: str | None) -> float:
    if not text:
        return 0.0
    try:
        return parse_seconds(text.strip())
    except ValueError:
        return float("nan")


def job_options(point_dir: Path, meta: PointMeta) -> dict[str, str]:
    """The ``[global]`` options of a point's (first) job file, as iobench wrote them.

    Parameters
    ----------
    point_dir
        A saved point's directory.
    meta
        Its ``meta.json``.

    Returns
    -------
    dict of str to str
        Empty when the point has no job file (a skipped point, a hand-made directory).
    """
    names = [p.jobfile_name for p in meta.processes if p.jobfile_name]
    candidates = [point_dir / n for n in names] or sorted(point_dir.glob("job*.fio"))
    for path in candidates:
        try:
            text = read_text(path, FIO_TEXT, run_of(point_dir))
        except OSError:
            continue
        options: dict[str, str] = {}
        in_global = False
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("["):
                in_global = line == "[global]"
            elif in_global and "=" in line and not line.startswith((";", "#")):
                name, _, value = line.partition("=")
                options[name.strip()] = value.strip()
        return options
    return {}


def timing_of(options: dict[str, str]) -> dict[str, Any]:
    """A point's window and ramps, from its job file's options (see :data:`TIMING`)."""
    window = options.get("log_avg_msec")
    try:
        window_ms = int(window) if window else DEFAULT_LOG_AVG_MSEC
    except ValueError:
        window_ms = DEFAULT_LOG_AVG_MSEC
    steadystate_s = _seconds(options.get("steadystate_duration") or options.get("ss_dur"))
    return {
        "window_s": max(window_ms, 1) / 1000.0,
        "ramp_s": _seconds(options.get("ramp_time")),
        "steadystate_ramp_s": _seconds(options.get("steadystate_ramp_time") or options.get("ss_ramp")),
        "steadystate_s": steadystate_s,
        "steadystate": (options.get("steadystate") or options.get("ss") or "iops_slope:0.01%")
        if steadystate_s > 0
        else None,
    }


def unix_time(options: dict[str, str]) -> bool:
    """Whether a job file's logs are stamped in Unix (or another clock's) time, not from each job's start."""
    return any(_truthy(options.get(name)) for name in EPOCH_OPTIONS[:2])


@dataclass
class RunLogs:
    """A run's logs as read: the long frame (no parameter columns), the timing table, the points.

    ``problems``: per point × repeat, why one of its logs could not be read
    (naming the file); its other logs are in ``series``.
    """

    series: pd.DataFrame
    timing: pd.DataFrame
    points: list[tuple[Path, PointMeta]]
    problems: dict[tuple[int, int], str] = field(default_factory=dict)
    spans: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(SPAN_COLUMNS)))
    """Each host job's start and end (:data:`~iobench.results.hostspan.SPAN_COLUMNS`), in
    seconds on its point's clock (``t_s``'s), for points whose logs are in Unix time."""


def _log_files(
    point_dir: Path,
    index: int,
    timing: dict[str, Any],
    max_value: bool,
    clients: dict[str, str],
    problems: list[str],
) -> list[_File]:
    """The point's logs; one whose client suffix names no host of the point goes to ``problems``."""
    try:
        names = sorted(os.listdir(point_dir))
    except OSError:
        return []
    directory = os.fspath(point_dir)
    window_ms = round(timing["window_s"] * 1000)
    files = []
    for name in names:
        match = LOG_FILE.match(name)
        if match is None:
            continue
        job, client = match["job"], match["client"]
        host = None if client is None else clients.get(client)
        if client is not None and host is None:
            problems.append(
                f"{os.path.join(directory, name)}: a log of fio client {client!r}, which names no one host "
                "of the point (left out)"
            )
            continue
        files.append(
            _File(
                os.path.join(directory, name),
                index,
                host,
                match["section"],
                match["kind"],
                None if job is None else int(job),
                window_ms,
                max_value,
            )
        )
    return files


def read_run_logs(
    run: RunDir,
    points: Iterable[tuple[Path, PointMeta]] | None = None,
    runtimes: Mapping[tuple[int, int], pd.DataFrame] | None = None,
) -> RunLogs:
    """Every log of every ``ok`` point of ``run``, and each point × repeat's timing.

    ``points``: the run's saved points, already read (default: read them).
    ``runtimes``: per point × repeat on hosts, its jobs' runtimes already read
    (:func:`~iobench.results.hostspan.runtimes_of`; default: read from fio's output).
    A log that cannot be read, or is not in fio's format, is left out and
    named (file and line) in ``RunLogs.problems``; so is a point on hosts
    whose jobs cannot be placed in time (its logs are then kept, counted from
    its first sample less one window).
    """
    files: list[_File] = []
    rows: list[dict[str, Any]] = []
    chosen: list[tuple[Path, PointMeta]] = []
    unix: list[bool] = []
    named: dict[int, list[str]] = {}
    for point_dir, meta in take_inventory(run).readable() if points is None else points:
        if meta.status != "ok":
            continue
        options = job_options(point_dir, meta)
        timing = timing_of(options)
        rows.append({"point": meta.point, "repeat": meta.repeat, **timing})
        said: list[str] = []
        files += _log_files(
            point_dir, len(chosen), timing, _truthy(options.get("log_max_value")), client_hosts(meta), said
        )
        if said:
            named[len(chosen)] = said
        unix.append(unix_time(options))
        chosen.append((point_dir, meta))
    timing_frame = pd.DataFrame(rows, columns=list(TIMING))
    bad: dict[int, str] = {}
    series = parse_logs(files, timing_frame, bad)
    problems: dict[tuple[int, int], str] = {}
    for number, problem in bad.items():
        meta = chosen[files[number].index][1]
        problems.setdefault((meta.point, meta.repeat), problem)
    for index, said in named.items():
        meta = chosen[index][1]
        problems.setdefault((meta.point, meta.repeat), said[0])
    local = run.manifest().machine.host
    if local is not None and len(series):
        series["host"] = series["host"].fillna(local)
    series, spans = _on_point_clocks(series, timing_frame, chosen, unix, problems, runtimes or {})
    return RunLogs(series, timing_frame, chosen, problems, spans)


def _on_point_clocks(
    series: pd.DataFrame,
    timing: pd.DataFrame,
    chosen: list[tuple[Path, PointMeta]],
    unix: list[bool],
    problems: dict[tuple[int, int], str],
    known: Mapping[tuple[int, int], pd.DataFrame],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The logs in Unix time counted from their point's earliest job start; the host jobs' spans on that clock."""
    empty = pd.DataFrame(columns=list(SPAN_COLUMNS))
    if not any(unix) or series.empty:
        return series, empty
    where = series.groupby(["point", "repeat"], sort=False).indices
    t_ms = np.round(series["t_s"].to_numpy(dtype=float) * 1000.0)
    t_s = series["t_s"].to_numpy(dtype=float).copy()
    window = series["window"].to_numpy(dtype=np.int64, na_value=0).copy()
    spans = []
    for index, ((point_dir, meta), absolute) in enumerate(zip(chosen, unix, strict=True)):
        if not absolute:
            continue
        at = where.get((meta.point, meta.repeat))
        if at is None or not len(at):
            continue
        rows = series.iloc[at][["host", "jobname", "job", "metric"]].assign(t_ms=t_ms[at])
        width_ms = float(timing["window_s"].iloc[index]) * 1000.0
        problem: str | None = None
        runtimes = known.get((meta.point, meta.repeat))
        if runtimes is None:
            try:
                runtimes = host_runtimes(point_dir, meta)
            except ResultsError as exc:
                runtimes, problem = runtimes_of(pd.DataFrame()), str(exc)
        found, unknown = job_spans(rows, runtimes)
        problem = problem or unknown
        starts = found["start_ms"].to_numpy(dtype=float)
        if problem is not None:
            problems.setdefault(
                (meta.point, meta.repeat), f"{point_dir}: the hosts' jobs cannot be placed in time: {problem}"
            )
        origin = float(np.nanmin(starts)) if np.isfinite(starts).any() else float(t_ms[at].min() - width_ms)
        t_s[at] = (t_ms[at] - origin) / 1000.0
        window[at] = np.floor((t_ms[at] - origin) / width_ms + 0.5).astype(np.int64)
        spans.append(
            found.assign(
                point=meta.point,
                repeat=meta.repeat,
                start_s=(found["start_ms"] - origin) / 1000.0,
                end_s=(found["end_ms"] - origin) / 1000.0,
            )[list(SPAN_COLUMNS)]
        )
    series = series.assign(t_s=t_s, window=pd.array(window, dtype="Int64"))
    if not spans:
        return series, empty
    out = pd.concat(spans, ignore_index=True)
    return series, out.astype({"point": "Int64", "repeat": "Int64", "job": "Int64"})


def _read_bytes(path: str, bad: dict[int, str], number: int) -> bytes:
    """The bytes of log ``number`` (at ``path``); nothing, with the reason in ``bad``, when it cannot be read."""
    try:
        data = read_bytes(path, FIO_LOG, run_of(Path(path).parent))
    except OSError as exc:
        bad[number] = f"{path}: cannot read the log: {exc.strerror}"
        return b""
    if data and not data.endswith(b"\n"):
        data += b"\n"
    return data


_DTYPES = {0: np.int64, 1: np.float64, 2: np.int64}


def _table(data: bytes, width: int) -> pd.DataFrame:
    return pd.read_csv(
        io.BytesIO(data),
        header=None,
        names=list(range(width)),
        usecols=[0, 1, 2],
        dtype=_DTYPES,
        skipinitialspace=True,
        skip_blank_lines=False,
        engine="c",
    )


def _width(data: bytes) -> int:
    return max(4, data[: data.find(b"\n")].count(b",") + 1)


def _one_file(path: str, data: bytes) -> pd.DataFrame:
    """One log, parsed on its own: to say which file and line are wrong."""
    data = b"".join(line + b"\n" for line in data.splitlines() if line.strip())
    width = max([line.count(b",") + 1 for line in data.splitlines()] + [4])
    try:
        text = pd.read_csv(
            io.BytesIO(data),
            header=None,
            names=list(range(width)),
            usecols=[0, 1, 2],
            dtype=str,
            skipinitialspace=True,
            engine="c",
        )
    except (ValueError, pd.errors.ParserError) as exc:
        raise ResultsError(
            f"{path}: not a fio log (expected lines `time_ms, value, ddir, bs, ...`): {exc}"
        ) from None
    table = text.apply(pd.to_numeric, errors="coerce")
    whole = table[[0, 2]].notna().all(axis=1) & (table[[0, 2]].fillna(0) % 1 == 0).all(axis=1)
    bad = (table.isna().any(axis=1) | ~whole).to_numpy()
    if bad.any():
        line = int(np.flatnonzero(bad)[0]) + 1
        raise ResultsError(f"{path}:{line}: not a fio log line (expected `time_ms, value, ddir, bs, ...`)")
    typed: pd.DataFrame = table.astype(_DTYPES)
    return typed


def _read_lines(files: list[_File], bad: dict[int, str]) -> tuple[np.ndarray, pd.DataFrame]:
    """The rows of every file, parsed in one call, and each row's file; a file that is no fio log goes to ``bad``."""
    chunks = [_read_bytes(f.path, bad, number) for number, f in enumerate(files)]
    counts = np.array([c.count(b"\n") for c in chunks], dtype=np.int64)
    data = b"".join(chunks)
    owner = np.repeat(np.arange(len(files)), counts)
    if not data:
        return owner, pd.DataFrame({0: [], 1: [], 2: []})
    try:
        table = _table(data, max(_width(c) for c in chunks if c))
        if len(table) == len(owner) and not table.isna().to_numpy().any():
            return owner, table
    except (ValueError, pd.errors.ParserError):
        pass
    # Something is off: parse file by file, which names the culprit (or copes with ragged widths).
    tables, used = [], []
    for number, (f, chunk) in enumerate(zip(files, chunks, strict=True)):
        if not chunk:
            continue
        try:
            tables.append(_one_file(f.path, chunk))
        except ResultsError as exc:
            bad[number] = str(exc)
            continue
        used.append(number)
    if not tables:
        return np.zeros(0, dtype=np.int64), pd.DataFrame({0: [], 1: [], 2: []})
    sizes = np.array([len(t) for t in tables], dtype=np.int64)
    return np.repeat(np.array(used, dtype=np.int64), sizes), pd.concat(tables, ignore_index=True)


def _strings(codes: np.ndarray, names: list[str] | np.ndarray) -> pd.api.extensions.ExtensionArray:
    """``names[codes]`` as a string column, gathered by pyarrow (15x faster than from Python objects)."""
    labels = pa.array([str(n) for n in names], type=pa.large_string())
    column: pd.api.extensions.ExtensionArray = pd.array(
        labels.take(pa.array(codes, type=pa.int64())), dtype="string"
    )
    return column


def _strings_or_na(codes: np.ndarray, names: list[str]) -> pd.api.extensions.ExtensionArray:
    """:func:`_strings`, NA where a code is -1."""
    if not len(codes) or (codes < 0).all():
        return pd.array([pd.NA] * len(codes), dtype="string")
    column = _strings(np.where(codes < 0, 0, codes), names)
    column[codes < 0] = pd.NA
    return column


def _repeated(segment: np.ndarray, ddir: np.ndarray, t_ms: np.ndarray) -> np.ndarray:
    """Rows whose (job, direction, time stamp) an earlier row already had."""
    if len(t_ms) and int(t_ms.min()) >= 0 and int(t_ms.max()) < 2**38 and int(segment.max()) < 2**22:
        # One int64 per row hashes far faster than three columns.
        key = (segment.astype(np.int64) << 40) | (t_ms.astype(np.int64) << 2) | ddir.astype(np.int64)
        repeated: np.ndarray = pd.Index(key).duplicated()
        return repeated
    return pd.DataFrame({"s": segment, "d": ddir, "t": t_ms}).duplicated().to_numpy()


def parse_logs(files: list[_File], timing: pd.DataFrame, bad: dict[int, str] | None = None) -> pd.DataFrame:
    """The long frame of ``files`` (columns :data:`COLUMNS`; ``point`` and ``repeat`` from ``timing``).

    A file that cannot be read or is not a fio log is left out, with the
    reason (naming the file, and the line where there is one) in ``bad`` under
    its index in ``files``.

    Raises
    ------
    ResultsError
        Only without ``bad``: the first file left out, and why.
    """
    left_out: dict[int, str] = {} if bad is None else bad
    owner, table = _read_lines(files, left_out)
    t_ms = table[0].to_numpy(dtype=np.int64)
    raw = table[1].to_numpy(dtype=np.float64)
    ddir = table[2].to_numpy(dtype=np.int64)
    wrong = (ddir < 0) | (ddir > 2)
    if len(ddir) and wrong.any():
        for row in np.flatnonzero(wrong):
            left_out.setdefault(
                int(owner[row]),
                f"{files[owner[row]].path}: data direction {ddir[row]} is not 0, 1 or 2 (read/write/trim)",
            )
        keep = ~np.isin(owner, np.array(sorted(left_out), dtype=np.int64))
        owner, t_ms, raw, ddir = owner[keep], t_ms[keep], raw[keep], ddir[keep]
    if bad is None and left_out:
        raise ResultsError(left_out[min(left_out)])
    # A job ends where the time stamps of a file start again (per_job_logs=0 appends jobs).
    start = np.ones(len(t_ms), dtype=bool)
    start[1:] = (owner[1:] != owner[:-1]) | (t_ms[1:] < t_ms[:-1])
    segment = np.cumsum(start) - 1
    first_of_file = np.ones(len(owner), dtype=bool)
    first_of_file[1:] = owner[1:] != owner[:-1]
    file_first_segment = segment[first_of_file]
    ordinal = segment - np.repeat(
        file_first_segment, np.diff(np.r_[np.flatnonzero(first_of_file), len(owner)])
    )
    keep = ~_repeated(segment, ddir, t_ms)
    owner, t_ms, raw, ddir, ordinal = owner[keep], t_ms[keep], raw[keep], ddir[keep], ordinal[keep]

    index = np.array([f.index for f in files], dtype=np.int64)[owner]
    file_job = np.array([-1 if f.job is None else f.job for f in files], dtype=np.int64)[owner]
    job = np.where(file_job >= 0, file_job, ordinal + 1)
    window_ms = np.array([f.window_ms for f in files], dtype=np.int64)[owner]
    kind = np.array([2 * _KIND_CODE[f.kind] + f.max_value for f in files], dtype=np.int64)[owner]
    sections = sorted({f.section for f in files})
    code = {name: i for i, name in enumerate(sections)}
    section = np.array([code[f.section] for f in files], dtype=np.int64)[owner]
    hosts = sorted({f.host for f in files if f.host is not None})
    host_code = {name: i for i, name in enumerate(hosts)}
    host = np.array([host_code.get(f.host, -1) if f.host is not None else -1 for f in files], dtype=np.int64)
    host = host[owner]
    point = timing["point"].to_numpy(dtype=np.int64)[index] if len(timing) else index
    repeat = timing["repeat"].to_numpy(dtype=np.int64)[index] if len(timing) else index
    return pd.DataFrame(
        {
            "point": pd.array(point, dtype="Int64"),
            "repeat": pd.array(repeat, dtype="Int64"),
            "host": _strings_or_na(host, hosts),
            "jobname": _strings(section, sections),
            "job": pd.array(job, dtype="Int64"),
            "direction": _strings(ddir, list(DIRECTIONS)),
            "window": pd.array(np.floor(t_ms / window_ms + 0.5).astype(np.int64), dtype="Int64"),
            "t_s": t_ms / 1000.0,
            "metric": _strings(kind, _METRICS),
            "value": raw * _FACTORS[kind],
        }
    )


def _param_array(values: list[Any]) -> Any:
    kinds = {type(v) for v in values if v is not None}
    if kinds and kinds <= {int, bool}:
        return pd.array(values, dtype="Int64")
    if kinds and kinds <= {int, float}:
        return pd.array(values, dtype="Float64")
    return pd.array([None if v is None else str(v) for v in values], dtype="string")


def _with_params(series: pd.DataFrame, logs: RunLogs) -> pd.DataFrame:
    """Add each point's parameter columns (its matrix axes, as in the tidy frame)."""
    if series.empty:
        return series
    values = [meta.params for _, meta in logs.points]
    axes = list(dict.fromkeys(a for v in values for a in v if a not in PLACEMENT))
    if not axes:
        return series
    keys = pd.MultiIndex.from_arrays([logs.timing["point"], logs.timing["repeat"]])
    rows = keys.get_indexer(pd.MultiIndex.from_arrays([series["point"], series["repeat"]]))
    columns = {axis: _param_array([v.get(axis) for v in values]) for axis in axes}
    return series.assign(**{axis: column.take(rows) for axis, column in columns.items()})


def run_dir_of(run: Any) -> RunDir:
    """The :class:`RunDir` of ``run``: a path, a :class:`RunDir`, or what :func:`iobench.run` returned.

    Raises
    ------
    ResultsError
        When it is not a run directory.
    """
    if isinstance(run, RunDir):
        return run
    path = getattr(run, "run_dir", run)
    if not isinstance(path, str | os.PathLike):
        # The type, not the value: a frame's repr would fill the screen.
        raise ResultsError(
            f"a {type(run).__name__} is not a run directory: give its path (or what iobench.run returned)"
        )
    return RunDir.open(path)


def series_frame(logs: RunLogs, run: RunDir | None = None) -> pd.DataFrame:
    """The long frame of :func:`timeseries` from logs already read (``run`` adds the machine facts)."""
    series = _with_params(logs.series, logs)
    series.attrs["timing"] = logs.timing.to_dict("records")
    series.attrs["spans"] = [
        {k: (None if pd.isna(v) else v) for k, v in record.items()}
        for record in logs.spans.to_dict("records")
    ]
    series.attrs["notes"] = list(dict.fromkeys(logs.problems.values()))
    if run is not None:
        machine = run.manifest().machine.facts()
        series.attrs["machine"] = {k: machine.get(k) for k in ("host", "cpu_model", "kernel", "fio_version")}
    return series


def timeseries(run: str | os.PathLike[str] | RunDir | Any) -> pd.DataFrame:
    """Every point's throughput and latency over time, from fio's own logs.

    Parameters
    ----------
    run
        A run directory (a path, or the :class:`~iobench.runner.sweep.RunResult`
        that :func:`iobench.run` returns).

    Returns
    -------
    pandas.DataFrame
        The long frame of the module's table: ``point``, ``repeat``,
        ``jobname``, ``job``, ``direction``, ``window``, ``t_s``, ``metric``,
        ``value``, then the parameter columns; one row per log line of every
        ``ok`` point, in point order. Empty (with those columns) when the run's
        points wrote no logs (runs made before iobench asked fio for them).
        ``attrs["timing"]`` lists, per point × repeat, ``window_s``
        (``log_avg_msec``), ``ramp_s`` (``ramp_time``: before the logs begin),
        ``steadystate_ramp_s``, ``steadystate_s`` and ``steadystate`` (fio's
        steady-state options, when the point used them); ``attrs["spans"]``,
        for points on hosts, each job's ``host``, ``jobname``, ``job``,
        ``start_s`` and ``end_s`` on ``t_s``'s clock
        (:mod:`iobench.results.hostspan`); ``attrs["machine"]``
        the host, CPU, kernel and fio version for captions; ``attrs["notes"]``
        each log left out because it cannot be read or is not in fio's format
        (naming the file and line).

    Raises
    ------
    ResultsError
        When ``run`` is not a run directory.

    Examples
    --------
    >>> ts = iobench.timeseries("results/demo-20260101-120000")      # doctest: +SKIP
    >>> ts[ts.metric == "iops"].groupby(["point", "repeat"])["value"].describe()  # doctest: +SKIP
    """
    run_dir = run_dir_of(run)
    return series_frame(read_run_logs(run_dir), run_dir)
