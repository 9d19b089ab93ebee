"""Figures into files: atomically (a full disk leaves no half-drawn file), and a run's default set.

Drawing after a run is the caller's choice (the CLI, the report, a notebook):
the runner never draws.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from iobench.errors import NextStep, ResultsError, RunStorageError
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

    The figures are drawn in parallel (:func:`start_figures`).

    Raises
    ------
    RunStorageError
        When a file cannot be written; the files written before are whole.
    """
    return start_figures(frame, out_dir, formats).wait()


Job = tuple[Callable[[], Any], list[Path]]
"""A function drawing a figure, and the files to save it in."""


def _draw(job: Job) -> None:
    build, paths = job
    fig = build()
    for path in paths:
        save_figure_file(fig, path)


class FigureDrawing:
    """Figures being drawn, each in a child process of its own (:func:`start_figures`); :meth:`wait` collects them."""

    def __init__(self, jobs: Sequence[Job], children: dict[int, Job]) -> None:
        self.jobs = list(jobs)
        self.children = children

    def wait(self) -> list[Path]:
        """Wait for every figure; draw here what no child drew (a child that failed, or no children at all).

        Returns
        -------
        list of pathlib.Path
            Every file, figure by figure.

        Raises
        ------
        RunStorageError
            When a file cannot be written; the files written before are whole.
        """
        failed = {pid for pid in self.children if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0}
        drawn = {id(job) for pid, job in self.children.items() if pid not in failed}
        self.children = {}
        for job in self.jobs:
            if id(job) not in drawn:
                _draw(job)  # here a failure raises, with its message
        return [path for _, paths in self.jobs for path in paths]

    def cancel(self) -> None:
        """Stop the children still drawing and wait for them (the run failed after they started)."""
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in self.children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.children = {}


def start_figures(
    frame: pd.DataFrame,
    out_dir: str | os.PathLike[str],
    formats: tuple[str, ...] = ("png",),
    *,
    fork: bool = True,
) -> FigureDrawing:
    """Start drawing every figure that fits ``frame`` into ``out_dir``: one forked process per figure.

    Drawing is nearly all CPU in Python and holds the GIL, so threads would not
    help; forked children share the frame and the loaded libraries, and the
    kernel spreads them over the CPUs while this process goes on. With one
    usable CPU (or off Linux, or with ``fork`` false) nothing is forked and
    :meth:`FigureDrawing.wait` draws them. Fork only with no other thread of
    this process busy in Python.

    Raises
    ------
    RunStorageError
        When ``out_dir`` cannot be made.
    """
    builders = figure_builders(frame)
    jobs = [(build, [Path(out_dir) / f"{name}.{fmt}" for fmt in formats]) for name, build in builders.items()]
    if not jobs:
        return FigureDrawing([], {})
    with storage(Path(out_dir)):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    cpus = len(os.sched_getaffinity(0)) if sys.platform == "linux" else 1
    children: dict[int, Job] = {}
    if fork and cpus >= 2:
        for job in jobs:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - a child's coverage is not collected
                code = 1
                with contextlib.suppress(BaseException):
                    _draw(job)
                    code = 0
                os._exit(code)
            children[pid] = job
    return FigureDrawing(jobs, children)


def start_run_figures(run_dir: str | os.PathLike[str], frame: pd.DataFrame) -> FigureDrawing:
    """Start drawing a run's default figures (:func:`start_figures`) into ``<run_dir>/figures/``."""
    return start_figures(frame, RunDir(Path(run_dir)).figures)


def run_figures(
    run_dir: str | os.PathLike[str],
    frame: pd.DataFrame | None,
    counts: dict[str, int],
    drawing: FigureDrawing | None = None,
) -> list[Path]:
    """The default figures of a run that just ended (its ``frame``; None draws nothing), into ``<run_dir>/figures/``.

    ``drawing``: what :func:`start_run_figures` started for this run, to collect instead of drawing again.

    Raises
    ------
    RunStorageError
        When they cannot be written (exit status 3): the points and the frame
        are saved already, and the message says ``iobench report`` draws them later.
    """
    path = Path(run_dir)
    try:
        if drawing is None:
            drawing = start_run_figures(path, frame) if frame is not None else FigureDrawing([], {})
        return drawing.wait()
    except RunStorageError as fault:
        fault.what = f"figures not drawn: {fault.what}"
        fault.run_dir, fault.counts = str(path), dict(counts)
        fault.kept = f"every point: {describe_counts(counts)} and the frame (results.parquet) in {path}"
        fault.remedy = remedy(fault)
        fault.steps = [NextStep("report", run_dir=str(path), does=f"draws them (into {path / 'report'})")]
        raise
