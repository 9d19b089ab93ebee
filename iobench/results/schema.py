"""The tidy frame's columns, declared once: name, dtype, unit, group and meaning.

Every column of a run's frame (``results.parquet``, :func:`iobench.load`) that
is not a matrix axis is one :class:`Column` of :data:`COLUMNS`, in frame order;
the matrix's axes come right after the ``identity`` group. What reads the
schema from here rather than restating it:

- the frame's column order and the dtypes of the columns iobench adds
  (:mod:`iobench.results.assemble`);
- what is not a parameter (:func:`iobench.results.points.parameter_columns`);
- the column groups the rest of the package names (``IDENTITY``,
  ``PLACEMENT``, ``TELEMETRY``, ... in :mod:`iobench.results.points`);
- the frame's version (:data:`FRAME_VERSION`, :func:`fingerprint`): a saved
  frame whose schema differs is rebuilt from the points;
- docs/frame.md's table (:func:`markdown_table`; a test compares them).

fio's rows (:mod:`iobench.results.fioout.rows`) have their columns and dtypes
checked against this table by a test.

Adding a column is one entry here (and the code that fills it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

#: Bump when what a column means changes without its name or dtype changing (a new rule for a
#: point's numbers, say): saved frames of an older version are rebuilt from their points.
FRAME_VERSION = 4


@dataclass(frozen=True)
class Column:
    """One column of the tidy frame.

    Attributes
    ----------
    name : str
        The column's name.
    dtype : str
        Its pandas dtype: ``Int64``, ``Float64``, ``string`` or ``boolean``.
    unit : str
        Its unit (``µs``, ``bytes/s``, ``%``, ...); empty for counts without one and for text.
    group : str
        One of :data:`GROUPS`.
    meaning : str
        One line.
    """

    name: str
    dtype: str
    unit: str
    group: str
    meaning: str


#: The groups, in frame order; the matrix's axes ("parameters") come after ``identity``.
GROUPS: dict[str, str] = {
    "identity": "which row: the run, the point × repeat, the job and direction, and how the point ended",
    "placement": "where and how the point ran, as recorded while it ran",
    "fio": "fio's numbers of the job × direction (a field fio did not report is NA, never 0)",
    "run": "the point's bookkeeping",
    "steady": "whether the point × repeat reached steady state (docs/timeseries.md)",
    "telemetry": "system samples of the point's measured window (docs/telemetry.md)",
    "validity": "whether the number is real: findings of the validity checks (docs/validity.md)",
    "hosts": "a point on several hosts: when they ran together, and hosts far from the others (docs/numbers.md)",
    "fio-extra": "fio's reporting group and json+ latency histograms",
    "totals": "not in the frame: what point_totals and summarize add",
}

_I, _F, _S, _B = "Int64", "Float64", "string", "boolean"

COLUMNS: tuple[Column, ...] = (
    Column("run_id", _S, "", "identity", "the run directory's name"),
    Column("point", _I, "", "identity", "the point (one combination of the matrix's axes), from 1"),
    Column("repeat", _I, "", "identity", "the repeat of the point, from 1"),
    Column("host", _S, "", "identity", "the machine fio ran on (a host's configured name with hosts:)"),
    Column("jobname", _S, "", "identity", "fio's job (section) name"),
    Column("job_index", _I, "", "identity", "the job's number within its section (numjobs), from 0"),
    Column("direction", _S, "", "identity", "read, write or trim; NA on the one row of a point without I/O"),
    Column(
        "status",
        _S,
        "",
        "identity",
        "ok, failed, timeout, skipped, interrupted, or damaged (its files cannot be read: see reason)",
    ),
    Column("target", _S, "", "placement", "the target file or device the job ran on"),
    Column("target_node", _I, "", "placement", "the target's home NUMA node"),
    Column("cpu_node", _I, "", "placement", "the NUMA node the point was bound to (NA: unbound)"),
    Column("cpus", _S, "", "placement", "the CPUs the point was allowed (cpulist)"),
    Column(
        "cpus_observed",
        _S,
        "",
        "placement",
        "the CPUs /proc showed fio's workers on (per job when workers map onto jobs)",
    ),
    Column("scheduler", _S, "", "placement", "the target disks' I/O scheduler during the point"),
    Column("readahead_kb", _I, "KiB", "placement", "the target disks' readahead during the point"),
    Column("iops", _F, "I/O/s", "fio", "I/Os completed per second"),
    Column("bw_bytes", _F, "bytes/s", "fio", "bytes transferred per second"),
    Column("io_bytes", _I, "bytes", "fio", "bytes transferred"),
    Column("runtime_ms", _I, "ms", "fio", "the direction's runtime"),
    Column("lat_mean_us", _F, "µs", "fio", "mean total latency (submission + completion)"),
    Column("clat_mean_us", _F, "µs", "fio", "mean completion latency"),
    Column("slat_mean_us", _F, "µs", "fio", "mean submission latency"),
    Column("clat_p50_us", _F, "µs", "fio", "completion latency, 50th percentile"),
    Column("clat_p90_us", _F, "µs", "fio", "completion latency, 90th percentile"),
    Column("clat_p99_us", _F, "µs", "fio", "completion latency, 99th percentile"),
    Column("clat_p99_9_us", _F, "µs", "fio", "completion latency, 99.9th percentile"),
    Column("usr_cpu", _F, "%", "fio", "user CPU time over the job's runtime (NA when fio measured none)"),
    Column("sys_cpu", _F, "%", "fio", "system CPU time over the job's runtime (NA when fio measured none)"),
    Column("ctx", _I, "", "fio", "context switches"),
    Column("error", _I, "", "fio", "fio's error number for the job (0: none)"),
    Column("fio_version", _S, "", "fio", "the fio that wrote the output"),
    Column("cpu_us_per_io", _F, "µs", "fio", "user + system CPU time per I/O completed (every direction)"),
    Column("inflight", _F, "I/Os", "fio", "mean I/Os in flight, by Little's law: iops × lat_mean_us / 1e6"),
    Column("total_ios", _I, "I/Os", "fio", "I/Os completed in the direction"),
    Column(
        "job_runtime_ms", _I, "ms", "fio", "the time usr_cpu and sys_cpu are shares of (fio's job_runtime)"
    ),
    Column("reason", _S, "", "run", "why the point did not finish ok (or is damaged), naming the file"),
    Column("runtime_requested_ms", _I, "ms", "run", "the runtime the matrix asked for"),
    Column("steady", _B, "", "steady", "the point × repeat reached steady state (NA: could not be judged)"),
    Column("steady_reason", _S, "", "steady", "why, with the numbers; or why it could not be judged"),
    Column("dev_iops", _F, "I/O/s", "telemetry", "the target devices' own I/Os per second, this direction"),
    Column(
        "dev_bw_bytes", _F, "bytes/s", "telemetry", "the target devices' own bytes per second, this direction"
    ),
    Column("dev_await_ms", _F, "ms", "telemetry", "the target devices' mean await, this direction"),
    Column("dev_util_pct", _F, "%", "telemetry", "the busiest target device's utilisation"),
    Column("dev_fio_ratio", _F, "", "telemetry", "dev_iops over fio's IOPS of the point in this direction"),
    Column("cpu_busy_pct", _F, "%", "telemetry", "the point's CPUs, mean busy share"),
    Column("cpu_busy_max_pct", _F, "%", "telemetry", "the machine's busiest CPU, busy share"),
    Column("cpu_sys_pct", _F, "%", "telemetry", "the point's CPUs, mean system share"),
    Column(
        "cpu_other_pct",
        _F,
        "%",
        "telemetry",
        "the point's CPUs, mean share taken by other processes' threads",
    ),
    Column(
        "cpu_other_max_pct", _F, "%", "telemetry", "the most other processes took of one of the point's CPUs"
    ),
    Column("cpu_other_top", _S, "", "telemetry", "the other process's thread that took the most of them"),
    Column("irq_remote_pct", _F, "%", "telemetry", "the targets' interrupts served on another NUMA node"),
    Column("top_thread", _S, "", "telemetry", "the thread with the largest CPU share"),
    Column("top_thread_pct", _F, "% of a CPU", "telemetry", "that thread's share"),
    Column(
        "bottleneck", _S, "", "telemetry", "what limited the point (cpu:sys, device, link, ..., none-found)"
    ),
    Column("bottleneck_reason", _S, "", "telemetry", "why, with the numbers"),
    Column(
        "telemetry_note", _S, "", "telemetry", "what was missing or unreadable, and what the numbers call for"
    ),
    Column("validity", _S, "", "validity", "the codes of what was found (space-separated; empty: nothing)"),
    Column("validity_detail", _S, "", "validity", "one sentence per finding, with the measured figures"),
    Column("validity_na", _S, "", "validity", "each check that could not run, and why"),
    Column(
        "window_s",
        _F,
        "s",
        "hosts",
        "the span all the point's hosts ran together, from each host's job start and end (NA: not on hosts)",
    ),
    Column("start_skew_ms", _F, "ms", "hosts", "the latest host's start minus the earliest host's"),
    Column("overlap_pct", _F, "%", "hosts", "window_s as a share of the longest-running host's span"),
    Column(
        "window_ios",
        _F,
        "I/Os",
        "hosts",
        "the job's I/Os in the direction within window_s (its IOPS log shaped, fio's total_ios scaled)",
    ),
    Column(
        "host_outliers",
        _S,
        "",
        "hosts",
        "hosts whose IOPS or p99 is far from the other hosts' (space-separated; empty: none; NA: not judged)",
    ),
    Column("host_outliers_detail", _S, "", "hosts", "one sentence per outlier host, with its figures"),
    Column("groupid", _I, "", "fio-extra", "fio's reporting group (stonewall/new_group)"),
    Column("clat_bins", _S, "", "fio-extra", "fio's json+ completion latency histogram, as text"),
    Column("lat_bins", _S, "", "fio-extra", "fio's json+ total latency histogram, as text"),
    Column("slat_bins", _S, "", "fio-extra", "fio's json+ submission latency histogram, as text"),
    Column("jobs", _I, "", "totals", "how many job rows a point total sums"),
    Column("hosts", _I, "", "totals", "how many hosts a point total sums (several: the cluster's numbers)"),
    Column("pct_exact", _B, "", "totals", "the percentiles are fio's own (merged json+ histograms)"),
    Column("unsteady", _I, "", "totals", "repeats judged not steady (summarize)"),
)

#: Every column by name.
BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}
#: The frame's own columns (every group but ``totals``), in frame order.
FRAME: tuple[str, ...] = tuple(c.name for c in COLUMNS if c.group != "totals")


def group(name: str) -> tuple[str, ...]:
    """The columns of one group, in frame order.

    Parameters
    ----------
    name : str
        A key of :data:`GROUPS`.

    Returns
    -------
    tuple of str
        Column names.

    Raises
    ------
    KeyError
        ``name`` is not a group.
    """
    if name not in GROUPS:
        raise KeyError(name)
    return tuple(c.name for c in COLUMNS if c.group == name)


def dtype(name: str) -> str:
    """The pandas dtype of column ``name`` (``KeyError`` for a column the schema does not declare)."""
    return BY_NAME[name].dtype


def fingerprint() -> str:
    """What a saved frame records of the schema it was written with: the version and every name and dtype."""
    text = ";".join(f"{c.name}:{c.dtype}" for c in COLUMNS if c.group != "totals")
    return f"{FRAME_VERSION}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def markdown_table() -> str:
    """The schema as docs/frame.md shows it: one row per column, grouped, with the matrix's axes where they go."""
    lines = ["| column | dtype | unit | meaning |", "|---|---|---|---|"]
    for name, meaning in GROUPS.items():
        lines.append(f"| **{name}** | | | {meaning} |")
        lines += [f"| `{c.name}` | {c.dtype} | {c.unit} | {c.meaning} |" for c in COLUMNS if c.group == name]
        if name == "identity":
            lines.append("| **parameters** | | | one column per matrix axis (sizes in bytes, booleans 0/1) |")
    return "\n".join(lines)
