"""fio job files from points: pure, deterministic text."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

from iobench.matrix.fiocatalog import FioCatalog
from iobench.matrix.fiooptions import fio_filename
from iobench.matrix.targets import Target
from iobench.planner.timelogs import global_log_options, section_log_options


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
        ``log_avg_msec`` (added when ``options`` lack it), and its latency
        histogram log when ``options`` set ``log_hist_msec``:
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
        lines += [f"{name}={value}" for name, value in section_log_options(target.section, options).items()]
    return "\n".join(lines) + "\n"


def opened_problems(
    catalog: FioCatalog, jobs: Sequence[tuple[str, Mapping[str, str]]]
) -> dict[int, dict[str, str]]:
    """Ask fio which files each job file opens; say where that differs from the targets the guard judged.

    fio is asked once for every job file (:meth:`~iobench.matrix.fiocatalog.FioCatalog.opened_files`),
    and not at all when the same job files were accepted before (remembered by hash).

    Parameters
    ----------
    catalog
        The fio that will run the job files.
    jobs
        Each job file's text and its job sections' targets (``{section: path}``).

    Returns
    -------
    dict of int to dict of str to str
        By position in ``jobs`` and then by job section, what fio would open
        instead; empty when every job section opens exactly its target.

    Raises
    ------
    FioError
        When fio rejects a job file or cannot say what it opens.
    """
    key = (
        "opens:"
        + hashlib.sha256(json.dumps([[text, dict(sections)] for text, sections in jobs]).encode()).hexdigest()
    )
    if not jobs or catalog.accepted(key):
        return {}
    problems: dict[int, dict[str, str]] = {}
    answers = catalog.opened_files([text for text, _ in jobs])
    for index, ((_, wanted), found) in enumerate(zip(jobs, answers, strict=True)):
        seen = {section.name: section for section in found}
        mine: dict[str, str] = {}
        for name, path in wanted.items():
            section = seen.pop(name, None)
            if section is None or section.files is None:
                mine[name] = "fio reads the job file's sections otherwise, so what it would open is unknown"
            elif section.inherited != 0 or section.files != [path]:
                extra = f" and {section.inherited} file(s) from [global]" if section.inherited > 0 else ""
                opened = ", ".join(repr(f) for f in section.files) or "nothing"
                mine[name] = f"fio would open {opened}{extra}, not {path!r}"
        mine.update(dict.fromkeys(seen, "fio would run a job section iobench did not write"))
        if mine:
            problems[index] = mine
    if not problems:
        catalog.accept(key)
        catalog.save()
    return problems
