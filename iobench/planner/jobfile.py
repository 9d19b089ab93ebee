"""fio job files from points: pure, deterministic text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from iobench.matrix.model import Target
from iobench.planner.timelogs import global_log_options, section_log_options


def fio_filename(path: str) -> str:
    """``path`` as a fio ``filename=`` value: ``:`` separates files, so it is escaped."""
    return path.replace("\\", "\\\\").replace(":", "\\:")


def render_jobfile(
    *,
    title: str,
    params: Mapping[str, str],
    options: Mapping[str, str],
    targets: Sequence[Target],
    job_cpus: Sequence[Sequence[int]] | None = None,
) -> str:
    """Return the job file for one fio process of one point.

    Parameters
    ----------
    title
        A comment line naming the run and point.
    params
        The point's parameters, repeated in a comment so the file explains itself.
    options
        ``[global]`` options in the order they are written.
    targets
        One job section each, named after the target. Each section writes
        fio's bandwidth, IOPS and latency logs under its name, averaged over
        ``log_avg_msec`` (added when ``options`` lack it):
        :mod:`iobench.planner.timelogs`.
    job_cpus
        Per job, the CPUs it is pinned to (fio's ``cpus_allowed_policy=split``
        gives job *i* the *i*-th CPU of ``cpus_allowed``); None leaves jobs unpinned.
    """
    lines = [f"; {title}"]
    if params:
        lines.append("; " + " ".join(f"{k}={v}" for k, v in params.items()))
    lines.append("[global]")
    lines += [f"{name}={value}" for name, value in {**options, **global_log_options(options)}.items()]
    if job_cpus is not None:
        order = [cpu for cpus in job_cpus for cpu in cpus]
        lines.append(f"cpus_allowed={','.join(str(c) for c in order)}")
        lines.append("cpus_allowed_policy=split")
    for target in targets:
        lines.append("")
        lines.append(f"[{target.section}]")
        lines.append(f"filename={fio_filename(target.path)}")
        if target.size is not None:
            lines.append(f"size={target.size}")
        lines += [f"{name}={value}" for name, value in section_log_options(target.section).items()]
    return "\n".join(lines) + "\n"
