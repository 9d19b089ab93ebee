"""fio's own time-series logs, written by every point: the options that ask for them and the files they make.

Every job section of every job file asks fio for its bandwidth, IOPS and
latency logs (``write_bw_log``, ``write_iops_log``, ``write_lat_log``) named
after the section, averaged over windows of ``log_avg_msec`` milliseconds
(:data:`DEFAULT_LOG_AVG_MSEC` unless the matrix sets it, under ``fio:`` or as
an axis, like any fio option). fio runs in the point's directory, so the logs
land there beside ``fio.json``::

    <section>_iops.<job>.log   IOPS               <section>_lat.<job>.log   total latency (ns)
    <section>_bw.<job>.log     bandwidth (KiB/s)  <section>_clat.<job>.log  completion latency (ns)
                                                  <section>_slat.<job>.log  submission latency (ns)

A point whose options set ``log_hist_msec`` (above 0) also gets fio's
completion-latency histogram log (``write_hist_log``, named after the section
too): ``<section>_clat_hist.<job>.log``, one line per window and direction
with that window's count in each of fio's latency bins
(:mod:`iobench.results.histlogs`). It is asked for, not written always: a
line holds every bin (1,856 in fio 3.33), some 4 KB a second per job.

``<job>`` is fio's job number within its fio process (1..N, the clones of each
section counted in section order). With ``per_job_logs=0`` fio leaves the
number out and a section's jobs append to one file, one job after another.

A point on hosts runs one fio server per host; fio's client brings each
host's logs back as ``<log>.<client>`` (``<log>.host-<name>``, see
:mod:`iobench.results.fioout.clients`). Those job files also set
``log_unix_epoch=1`` (:func:`host_log_options`): each host then stamps its
samples with its own clock's Unix time instead of the time since its job
began, which is what tells when each host ran (docs/numbers.md, "Points on
several hosts").
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: The window fio averages its logs over when the matrix does not set ``log_avg_msec``.
DEFAULT_LOG_AVG_MSEC = 1000
#: The fio options iobench sets in every job section (a matrix may not set them).
LOG_OPTIONS: tuple[str, ...] = ("write_bw_log", "write_iops_log", "write_lat_log")
#: What a host's job file adds (:func:`host_log_options`); a matrix may not set these either: fio's
#: ``log_alternate_epoch_clock_id`` picks the clock ``log_unix_epoch`` reads.
HOST_LOG_OPTIONS: dict[str, str] = {"log_unix_epoch": "1"}
#: The fio options that choose the clock of the logs' time stamps (iobench's to set).
EPOCH_OPTIONS: tuple[str, ...] = ("log_unix_epoch", "log_alternate_epoch", "log_alternate_epoch_clock_id")
#: What fio writes for them: the kind in each file name.
LOG_KINDS: tuple[str, ...] = ("iops", "bw", "lat", "clat", "slat")
#: A log file's name: its section, kind, job number (absent with ``per_job_logs=0``) and, for a log
#: fio's client brought back from a host's server, the client's name for that host (``host-a``).
LOG_FILE = re.compile(
    r"^(?P<section>.+)_(?P<kind>iops|bw|lat|clat|slat)(?:\.(?P<job>\d+))?\.log(?:\.(?P<client>[^/]+))?$"
)
#: The option that asks for the histogram log (its window, ms) and the one iobench then sets per section.
HIST_WINDOW_OPTION = "log_hist_msec"
HIST_LOG_OPTION = "write_hist_log"
#: A histogram log's name, read like :data:`LOG_FILE`.
HIST_LOG_FILE = re.compile(r"^(?P<section>.+)_clat_hist(?:\.(?P<job>\d+))?\.log(?:\.(?P<client>[^/]+))?$")


def global_log_options(options: Mapping[str, str]) -> dict[str, str]:
    """The ``[global]`` options a job file needs for its logs beyond ``options`` (the point's own).

    Parameters
    ----------
    options
        The point's fio options as written to the job file.

    Returns
    -------
    dict of str to str
        ``{"log_avg_msec": "1000"}`` when the point does not set the window itself, else nothing.
    """
    if "log_avg_msec" in options:
        return {}
    return {"log_avg_msec": str(DEFAULT_LOG_AVG_MSEC)}


def hist_log_wanted(options: Mapping[str, str]) -> bool:
    """Whether a point's fio options ask for the histogram log: ``log_hist_msec`` set above 0."""
    value = options.get(HIST_WINDOW_OPTION, "").strip()
    return value.isdigit() and int(value) > 0


def section_log_options(section: str, options: Mapping[str, str]) -> dict[str, str]:
    """The options that make the jobs of job section ``section`` write their logs under its name.

    ``options`` are the point's own fio options: the histogram log is added
    when they ask for it (:func:`hist_log_wanted`).
    """
    logs = dict.fromkeys(LOG_OPTIONS, section)
    if hist_log_wanted(options):
        logs[HIST_LOG_OPTION] = section
    return logs


def host_log_options() -> dict[str, str]:
    """The ``[global]`` options a job file that runs on a host adds: its logs stamped in Unix time (ms).

    fio 3.33 reports no job's start time; with ``log_unix_epoch=1`` every log
    sample carries the host's wall-clock time, so the hosts of a point can be
    placed on one time line (:mod:`iobench.results.hostspan`).
    """
    return dict(HOST_LOG_OPTIONS)
