"""Figures into files: atomically (a full disk leaves no half-drawn file), and a run's default set.

Drawing after a run is the caller's choice (the CLI, the report, a notebook):
the runner never draws.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from iobench.errors import ResultsError, RunStorageError
from iobench.plots import save_figure
from iobench.plots.figures import FORMATS, figure_builders
from iobench.store.rundir import RunDir, describe_counts, remedy, replacing, storage


def save_figure_file(fig: Any, path: str | os.PathLike[str]) -> Path:
    """Save a matplotlib figure through a temporary name: a full disk leaves no half-drawn file at ``path``.

    Raises
    ------
    ResultsError
        When the suffix is not a figure format (``.png``, ``.svg``, ``.pdf``).
    RunStorageError
        When the file cannot be written.
    """
    if Path(path).suffix.lstrip(".").lower() not in FORMATS:
        raise ResultsError(f"{path}: cannot tell the figure format; name the file .png, .svg or .pdf")
    with replacing(path) as tmp:
        save_figure(fig, tmp)
    return Path(path)


def write_figures(
    frame: pd.DataFrame, out_dir: str | os.PathLike[str], formats: tuple[str, ...] = ("png",)
) -> list[Path]:
    """Every figure that fits ``frame`` (:func:`iobench.plots.figures_for`) into ``out_dir``, once per format.

    The figures are drawn in parallel (:func:`draw_all`).

    Raises
    ------
    RunStorageError
        When a file cannot be written; the files written before are whole.
    """
    builders = figure_builders(frame)
    if not builders:
        return []
    out = Path(out_dir)
    with storage(out):
        out.mkdir(parents=True, exist_ok=True)
    jobs = [(build, [out / f"{name}.{fmt}" for fmt in formats]) for name, build in builders.items()]
    draw_all(jobs)
    return [path for _, paths in jobs for path in paths]


Job = tuple[Callable[[], Any], list[Path]]
"""A function drawing a figure, and the files to save it in."""


def _draw(job: Job) -> None:
    build, paths = job
    fig = build()
    for path in paths:
        save_figure_file(fig, path)


def draw_all(jobs: Sequence[Job]) -> None:
    """Draw each figure and save it to its files, each in a process of its own when this process may use several CPUs.

    Drawing is nearly all CPU in Python and holds the GIL, so threads would not
    help; forked children share the frame and the loaded libraries, and the
    kernel spreads them over the CPUs. A figure a child did not save whole is
    drawn again here, where a failure raises as it would in one process.

    Raises
    ------
    RunStorageError
        When a file cannot be written; the files written before are whole.
    """
    cpus = len(os.sched_getaffinity(0)) if sys.platform == "linux" else 1
    if cpus < 2 or len(jobs) < 2:
        for job in jobs:
            _draw(job)
        return
    children: list[tuple[int, Job]] = []
    try:
        for job in jobs:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - a child's coverage is not collected
                code = 1
                with contextlib.suppress(BaseException):
                    _draw(job)
                    code = 0
                os._exit(code)
            children.append((pid, job))
    finally:
        failed = [job for pid, job in children if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0]
    for job in failed:
        _draw(job)


def run_figures(
    run_dir: str | os.PathLike[str], frame: pd.DataFrame | None, counts: dict[str, int]
) -> list[Path]:
    """The default figures of a run that just ended (its ``frame``; None draws nothing), into ``<run_dir>/figures/``.

    Raises
    ------
    RunStorageError
        When they cannot be written (exit status 3): the points and the frame
        are saved already, and the message says ``iobench report`` draws them later.
    """
    path = Path(run_dir)
    if frame is None:
        return []
    try:
        return write_figures(frame, RunDir(path).figures)
    except RunStorageError as fault:
        report = shlex.join(["iobench", "report", str(path)])
        fault.what = f"figures not drawn: {fault.what}"
        fault.run_dir, fault.counts = str(path), dict(counts)
        fault.kept = f"every point: {describe_counts(counts)} and the frame (results.parquet) in {path}"
        fault.finish = f"{remedy(fault)}, then `{report}` draws them (into {path / 'report'})"
        raise
