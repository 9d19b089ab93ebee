"""Figures into files: atomically (a full disk leaves no half-drawn file), and a run's default set.

Drawing after a run is the caller's choice (the CLI, the report, a notebook):
the runner never draws.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from iobench.errors import NextStep, ResultsError, RunStorageError
from iobench.plots.figures import FORMATS, figure_builders, save_figure
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

    The figures are drawn one after another in this process (which may have
    threads of its own: a notebook's kernel, the CLI's live display).

    Returns
    -------
    list of pathlib.Path
        Every file, figure by figure.

    Raises
    ------
    RunStorageError
        When a file cannot be written; the files written before are whole.
    """
    builders = figure_builders(frame)
    if not builders:
        return []
    with storage(Path(out_dir)):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in builders.items():
        fig = build()
        written += [save_figure_file(fig, Path(out_dir) / f"{name}.{fmt}") for fmt in formats]
    return written


def default_figures(df: pd.DataFrame, out_dir: str | Path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Write every figure of :func:`figures_for` to ``out_dir``, once per format (each file whole or not at all).

    Parameters
    ----------
    df
        A tidy frame.
    out_dir
        Directory for the files (made when missing): ``<name>.<format>``.
    formats
        Any of ``png`` (at 150 dpi), ``svg``, ``pdf``.

    Returns
    -------
    list of pathlib.Path
        The files written, figure by figure.

    Raises
    ------
    ResultsError
        A format is not one of :data:`FORMATS`.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ResultsError(f"figure format {', '.join(unknown)} is not one of {', '.join(FORMATS)}")
    return write_figures(df, out_dir, tuple(formats))


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
    try:
        return [] if frame is None else write_figures(frame, RunDir(path).figures)
    except RunStorageError as fault:
        fault.what = f"figures not drawn: {fault.what}"
        fault.run_dir, fault.counts = str(path), dict(counts)
        fault.kept = f"every point: {describe_counts(counts)} and the frame (results.parquet) in {path}"
        fault.remedy = remedy(fault)
        fault.steps = [NextStep("report", run_dir=str(path), does=f"draws them (into {path / 'report'})")]
        raise
