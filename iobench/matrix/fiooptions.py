"""Every fio option a matrix may name, in one table: allowed, managed by iobench, or refused.

The table is an allowlist. It holds every option of fio 3.33 (``fio
--cmdhelp=all``), the options of its I/O engines (``fio --enghelp=ENGINE``)
and the job-file directive ``include``; an option missing from it is refused,
so an option a newer fio adds is refused until it is classified here.

- **allowed**: written into the job file as the matrix gives it, some with a
  condition on the value (:attr:`Rule.check`), such as the plain file names
  of the logs a point may ask for.
- **managed**: iobench writes it itself (the target files, the job names, the
  bandwidth/IOPS/latency logs, the I/O scheduler); the matrix says what it wants
  through the iobench feature named in :attr:`Rule.instead`.
- **refused**: it reads, writes or deletes files other than the targets, runs
  or loads code, changes the machine, or acts as another user.

``docs/guard.md`` explains each class and what a user loses with each refusal;
a test keeps that page and this table in step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

OptionClass = Literal["allowed", "managed", "refused"]

#: A plain file name in the point's own directory: no '/', not '.' or '..', not a hidden dotfile.
LOG_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Rule:
    """How the matrix may use one fio option.

    Attributes
    ----------
    kind : {"allowed", "managed", "refused"}
        The option's class.
    why : str
        For managed and refused options, why the matrix may not set it;
        for allowed ones with a condition, the condition.
    instead : str
        What to write instead (managed and refused options).
    check : callable or None
        For allowed options with a condition: the value as written into the
        job file → why it is refused, or None when it is fine.
    """

    kind: OptionClass
    why: str = ""
    instead: str = ""
    check: Callable[[str], str | None] | None = None


#: How the files iobench itself keeps in a point's folder begin: a log may not take such a name.
OWN_FILES = ("fio", "job", "meta", "argv", "stderr", "telemetry", "host-")


def _log_name(value: str) -> str | None:
    if not LOG_NAME.match(value) or value in (".", ".."):
        return (
            f"{value!r} is not a plain file name: a log goes into the point's own directory, "
            "named with letters, digits, '.', '_' and '-' (no '/', not starting with '.')"
        )
    if value.lower().startswith(OWN_FILES):
        return (
            f"{value!r} could overwrite iobench's own files in the point's folder (fio.json, job*.fio, "
            "meta.json, argv.json, stderr.txt, telemetry*.parquet, host-*): choose a name that starts otherwise"
        )
    return None


def _one_file(value: str) -> str | None:
    if value == "1":
        return None
    return (
        f"nrfiles {value} would make fio add files beyond the target, which the write guard never judged; "
        "list each file as a target (`launch: per-target` runs them apart)"
    )


def _no_pattern_file(value: str) -> str | None:
    if "'" in value:
        return 'a pattern in single quotes is read from that file; write the pattern out (0x…, "text")'
    return None


def _anonymous_memory(value: str) -> str | None:
    if ":" in value:
        return (
            "`mem` with `:PATH` maps a file for the I/O buffers; use malloc, shm, shmhuge, mmap or mmaphuge"
        )
    return None


def allowed_engine(value: str) -> bool:
    """Whether ``value`` names an I/O engine the matrix may use (as fio spells it: lower case)."""
    name = value.strip().lower()
    return name in ENGINES and ENGINES[name] is None


def _engine(value: str) -> str | None:
    name = value.strip().lower()
    if allowed_engine(name):
        return None
    why = (
        ENGINES.get(name) or "it is not in iobench's engine table (a newer fio, or a name fio does not know)"
    )
    allowed = ", ".join(sorted(n for n, reason in ENGINES.items() if reason is None))
    return f"ioengine `{value}` is refused: {why}; use one of {allowed}"


ALLOWED = Rule("allowed")
_TRIM = Rule(
    "allowed",
    "a trim discards data: a point that sets it writes, and its targets need `--allow-write` on the command line",
)
_LOG = Rule("allowed", "a plain file name: the log goes into the point's own directory", check=_log_name)
_PLACEMENT = Rule(
    "allowed",
    "not together with the binding or placement axes, which write it themselves",
)

_TARGETS = "set the target under `targets:` (or --target); each job section opens exactly its target"
_FILE_SET = "it adds files beyond the targets, which the write guard never judged"
_REPLAY = "it replays the writes and trims of an I/O log read from a file, on the files that log names"
_REPLAY_INSTEAD = "describe the workload with rw, bs, rwmixread and friends"
_ENGINE_OPTION = "an option of an I/O engine iobench refuses (see `ioengine`)"

OPTIONS: dict[str, Rule] = {
    # --- the target files and the jobs: iobench's -------------------------------------
    "filename": Rule("managed", "iobench writes each job section's target", _TARGETS),
    "name": Rule("managed", "iobench names the job sections after their targets", _TARGETS),
    "directory": Rule("refused", _FILE_SET, _TARGETS),
    "opendir": Rule("refused", _FILE_SET, _TARGETS),
    "filename_format": Rule("refused", _FILE_SET, _TARGETS),
    "unique_filename": Rule("refused", "it only renames files under `directory`", _TARGETS),
    "nrfiles": Rule("allowed", "1 only: each job section opens exactly its target", check=_one_file),
    "wait_for": Rule(
        "refused",
        "it names other jobs, and iobench names the jobs",
        "run targets apart with `launch: per-target`",
    ),
    "per_job_logs": Rule(
        "managed",
        "iobench reads each job's logs back by the names fio gives them per job",
        "nothing: every job's log is kept, and `iobench.timeseries` combines them",
    ),
    "ioscheduler": Rule(
        "managed",
        "fio would switch the scheduler with no journal and no restore",
        "use the `scheduler` axis (journalled and put back after the run)",
    ),
    **dict.fromkeys(
        ("write_bw_log", "write_iops_log", "write_lat_log"),
        Rule(
            "managed",
            "iobench writes fio's bandwidth, IOPS and latency logs of every point itself",
            "set `log_avg_msec` for their window",
        ),
    ),
    "write_hist_log": Rule(
        "managed",
        "iobench names each job section's latency histogram log itself, to read it back",
        "set `log_hist_msec` (its window, ms) and every job section writes it",
    ),
    **dict.fromkeys(
        ("log_unix_epoch", "log_alternate_epoch", "log_alternate_epoch_clock_id"),
        Rule(
            "managed",
            "iobench chooses the clock of the logs' time stamps: a point on hosts logs in Unix time, "
            "to tell when each host ran",
            "read the time series with iobench.timeseries (relative to the point's start either way)",
        ),
    ),
    # --- code, other users, the machine -------------------------------------------------
    **dict.fromkeys(
        ("exec_prerun", "exec_postrun"),
        Rule(
            "refused",
            "it runs a program (a matrix is data, not code)",
            "run it yourself before or after iobench",
        ),
    ),
    "include": Rule(
        "refused", "it reads another job file (a matrix is data, not code)", "write the options under `fio:`"
    ),
    "profile": Rule(
        "refused",
        "a built-in profile makes jobs and files of its own",
        "write its workload as options under `fio:`",
    ),
    **dict.fromkeys(
        ("uid", "gid"),
        Rule(
            "refused",
            "the jobs would run as another user than the one the guard judged for",
            "run iobench as that user",
        ),
    ),
    **dict.fromkeys(
        ("cgroup", "cgroup_nodelete", "cgroup_weight"),
        Rule(
            "refused",
            "fio would create and delete cgroups (directories under the cgroup mount, named by the value)",
            "start iobench inside the cgroup you want (systemd-run --scope -p IOWeight=…)",
        ),
    ),
    # --- other files read or written, files deleted -------------------------------------
    **dict.fromkeys(
        (
            "read_iolog",
            "read_iolog_chunked",
            "replay_no_stall",
            "replay_redirect",
            "replay_scale",
            "replay_align",
            "replay_time_scale",
            "replay_skip",
            "merge_blktrace_file",
            "merge_blktrace_scalars",
            "merge_blktrace_iters",
        ),
        Rule("refused", _REPLAY, _REPLAY_INSTEAD),
    ),
    **dict.fromkeys(
        ("unlink", "unlink_each_loop"),
        Rule(
            "refused",
            "fio would delete the target files",
            "delete the files yourself after the run",
        ),
    ),
    "fill_device": Rule(
        "refused",
        "it writes until the file system is full, and for reads lays that much out first",
        "give the target a `size:`",
    ),
    "allow_mounted_write": Rule(
        "refused",
        "it turns off fio's own refusal to write a mounted device",
        "unmount the device (the guard refuses mounted devices anyway)",
    ),
    "write_iolog": _LOG,
    "mem": Rule("allowed", "anonymous memory only", check=_anonymous_memory),
    "buffer_pattern": Rule("allowed", "written out, not read from a file", check=_no_pattern_file),
    "verify_pattern": Rule("allowed", "written out, not read from a file", check=_no_pattern_file),
    "ioengine": Rule("allowed", "one of the engines allowed below", check=_engine),
    **dict.fromkeys(("trim_percentage", "trim_verify_zero", "trim_backlog", "trim_backlog_batch"), _TRIM),
    **dict.fromkeys(
        ("cpumask", "cpus_allowed", "cpus_allowed_policy", "numa_cpu_nodes", "numa_mem_policy"), _PLACEMENT
    ),
    # --- allowed as written --------------------------------------------------------------
    **dict.fromkeys(
        (
            "description",
            "lockfile",
            "rw",
            "bs",
            "ba",
            "bsrange",
            "bssplit",
            "bs_unaligned",
            "randrepeat",
            "randseed",
            "norandommap",
            "ignore_error",
            "rw_sequencer",
            "iodepth",
            "iodepth_batch",
            "iodepth_batch_complete_min",
            "iodepth_batch_complete_max",
            "iodepth_low",
            "serialize_overlap",
            "io_submit_mode",
            "size",
            "io_size",
            "filesize",
            "file_append",
            "offset",
            "offset_increment",
            "offset_align",
            "number_ios",
            "random_generator",
            "random_distribution",
            "percentage_random",
            "allrandrepeat",
            "file_service_type",
            "openfiles",
            "fallocate",
            "fadvise_hint",
            "fsync",
            "fdatasync",
            "write_barrier",
            "sync_file_range",
            "direct",
            "atomic",
            "buffered",
            "overwrite",
            "loops",
            "numjobs",
            "startdelay",
            "runtime",
            "time_based",
            "verify_only",
            "ramp_time",
            "clocksource",
            "verify",
            "do_verify",
            "verify_interval",
            "verify_offset",
            "verify_fatal",
            "verify_dump",
            "verify_async",
            "verify_backlog",
            "verify_backlog_batch",
            "experimental_verify",
            "verify_state_load",
            "verify_state_save",
            "zonemode",
            "zonesize",
            "zonecapacity",
            "zonerange",
            "zoneskip",
            "read_beyond_wp",
            "max_open_zones",
            "job_max_open_zones",
            "ignore_zone_limits",
            "zone_reset_threshold",
            "zone_reset_frequency",
            "lockmem",
            "rwmixread",
            "rwmixwrite",
            "nice",
            "prio",
            "prioclass",
            "thinktime",
            "thinktime_spin",
            "thinktime_blocks",
            "thinktime_blocks_type",
            "thinktime_iotime",
            "rate",
            "rate_min",
            "rate_process",
            "rate_cycle",
            "rate_ignore_thinktime",
            "rate_iops",
            "rate_iops_min",
            "max_latency",
            "latency_target",
            "latency_window",
            "latency_percentile",
            "latency_run",
            "invalidate",
            "sync",
            "write_hint",
            "create_serialize",
            "create_fsync",
            "create_on_open",
            "create_only",
            "allow_file_create",
            "pre_read",
            "end_fsync",
            "fsync_on_close",
            "exitall",
            "exit_what",
            "exitall_on_error",
            "stonewall",
            "new_group",
            "thread",
            "bwavgtime",
            "iopsavgtime",
            "log_entries",
            "log_avg_msec",
            "log_hist_msec",
            "log_hist_coarseness",
            "log_max_value",
            "log_offset",
            "log_prio",
            "log_compression",
            "log_compression_cpus",
            "log_store_compressed",
            "block_error_percentiles",
            "group_reporting",
            "stats",
            "zero_buffers",
            "refill_buffers",
            "scramble_buffers",
            "buffer_compress_percentage",
            "buffer_compress_chunk",
            "dedupe_percentage",
            "dedupe_mode",
            "dedupe_working_set_percentage",
            "dedupe_global",
            "clat_percentiles",
            "lat_percentiles",
            "slat_percentiles",
            "percentile_list",
            "significant_figures",
            "disk_util",
            "gtod_reduce",
            "disable_lat",
            "disable_clat",
            "disable_slat",
            "disable_bw_measurement",
            "gtod_cpu",
            "unified_rw_reporting",
            "continue_on_error",
            "error_dump",
            "kb_base",
            "unit_base",
            "hugepage-size",
            "flow_id",
            "flow",
            "flow_sleep",
            "steadystate",
            "steadystate_duration",
            "steadystate_ramp_time",
            # Options of the engines iobench allows.
            "cpuload",
            "cpuchunks",
            "cpumode",
            "exit_on_io_done",
            "thp",
            "hipri",
            "hipri_percentage",
            "uncached",
            "nowait",
            "stat_type",
            "cmdprio_percentage",
            "cmdprio_class",
            "cmdprio",
            "cmdprio_bssplit",
            "fixedbufs",
            "registerfiles",
            "sqthread_poll",
            "sqthread_poll_cpu",
            "nonvectored",
            "force_async",
            "cmd_type",
            "userspace_reap",
        ),
        ALLOWED,
    ),
    # --- options of refused engines ------------------------------------------------------
    **dict.fromkeys(
        (
            # net, netsplice, rdma
            "hostname",
            "port",
            "protocol",
            "nodelay",
            "listen",
            "pingpong",
            "interface",
            "ttl",
            "window_size",
            "mss",
            "bindname",
            "verb",
            # exec
            "program",
            "arguments",
            "grace_time",
            "std_redirect",
            # e4defrag
            "donorname",
            "inplace",
            # gfapi, nbd, rados, rbd
            "volume",
            "brick",
            "single-instance",
            "uri",
            "clustername",
            "pool",
            "clientname",
            "conf",
            "busy_poll",
            "touch_objects",
            "rbdname",
            # mtd, sg
            "skip_bad",
            "readfua",
            "writefua",
            "sg_write_mode",
            "stream_id",
        ),
        Rule("refused", _ENGINE_OPTION, "use an engine iobench allows"),
    ),
}

_FILES_ONLY = "iobench's targets are files and block devices, which this engine does not take"
_MUTATES = "it changes files beyond reading and writing their data"

#: fio's I/O engines: None where the matrix may use it, else why not.
ENGINES: dict[str, str | None] = {
    **dict.fromkeys(
        (
            "sync",
            "psync",
            "vsync",
            "pvsync",
            "pvsync2",
            "libaio",
            "io_uring",
            "posixaio",
            "mmap",
            "splice",
            "null",
            "cpuio",
            "filestat",
            "libpmem",
        )
    ),
    "exec": "it runs programs",
    "external": "it loads external code",
    "ftruncate": f"{_MUTATES} (it truncates them)",
    "falloc": f"{_MUTATES} (it allocates and punches space, whatever `rw` says)",
    "filecreate": f"{_MUTATES} (it creates files)",
    "filedelete": f"{_MUTATES} (it deletes them)",
    "e4defrag": f"{_MUTATES} (it moves their blocks and makes a donor file)",
    "sg": "SCSI pass-through sends commands the guard does not judge by `rw`; use libaio or io_uring on the block device",
    "io_uring_cmd": "it drives NVMe character devices, which the write guard does not judge",
    "mtd": "it drives MTD character devices, which the write guard does not judge",
    "dev-dax": "it drives DAX character devices, which the write guard does not judge",
    "pmemblk": "its file name carries a block size and pool size fio reads apart",
    **dict.fromkeys(
        ("net", "netsplice", "rdma", "gfapi", "gfapi_async", "rados", "rbd", "nbd", "http", "nfs", "libhdfs"),
        _FILES_ONLY,
    ),
}


#: The options the binding and placement axes write themselves.
PLACEMENT_OPTIONS = tuple(name for name, entry in OPTIONS.items() if entry is _PLACEMENT)
#: The options that make a point trim (a write) whatever its ``rw``.
TRIM_OPTIONS = tuple(name for name, entry in OPTIONS.items() if entry is _TRIM)


# --- what fio's job-file parser does to a value ---------------------------------------
#
# fio reads a job file line by line (init.c, parse.c in fio 3.33): it cuts a line at the
# first ';' or '#' (a comment), trims blanks and control characters at both ends, replaces
# ${VAR} with the environment and $pagesize, $mb_memory, $ncpus with numbers (and then hands
# the value to `bc` when it holds + - * /). `filename=` is then split at every ':' not
# preceded by a backslash (options.c get_next_str), which removes that backslash; no other
# escape exists, so a backslash cannot be written through unchanged.

#: Longest target path fio copies into its fixed PATH_MAX buffer (4096 with the terminating NUL).
PATH_MAX_BYTES = 4095


def value_problem(text: str) -> str | None:
    """Why fio would not read ``text`` as written in a job file (``;``, ``#``, ``$``); None when it would."""
    if "$" in text:
        return "fio would expand `$` in it (${VAR}, $ncpus, $pagesize, $mb_memory)"
    if ";" in text or "#" in text:
        return "fio ends a value at `;` or `#` (a comment) and would read less of it"
    return None


def filename_problem(path: str) -> str | None:
    """Why fio would open another file than ``path`` from ``filename=`` (see :func:`fio_filename`).

    None when :func:`fio_filename` writes it so that fio opens exactly ``path``.
    """
    if path != path.strip():
        return "it starts or ends with a blank, which fio trims"
    found = value_problem(path)
    if found:
        return found
    if "\\" in path:
        return "fio reads a backslash in a file name as an escape"
    if len(path.encode()) > PATH_MAX_BYTES:
        return f"it is longer than {PATH_MAX_BYTES} bytes (PATH_MAX)"
    return None


def fio_filename(path: str) -> str:
    """``path`` as a ``filename=`` value: fio separates files at ``:``, so each is escaped as ``\\:``.

    fio 3.33 reads ``\\:`` back as ``:`` (a test asks fio itself); paths that
    :func:`filename_problem` refuses never get here.
    """
    return path.replace(":", "\\:")


def rule(name: str) -> Rule:
    """The rule for fio option ``name`` (its canonical name, as fio names it).

    An option the table does not hold is refused: iobench allows what it has
    looked at, so an option a newer fio adds stays out until it is classified.
    """
    found = OPTIONS.get(name)
    if found is not None:
        return found
    return Rule(
        "refused",
        "iobench's option table does not know it (a newer fio?): it stays refused until it is classified",
        "leave it out, or classify it in iobench/matrix/fiooptions.py",
    )


def counts() -> dict[OptionClass, int]:
    """How many options of the table are allowed, managed and refused."""
    found: dict[OptionClass, int] = {"allowed": 0, "managed": 0, "refused": 0}
    for entry in OPTIONS.values():
        found[entry.kind] += 1
    return found
