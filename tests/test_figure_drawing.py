"""Figures drawn into files (plots/files.py): in this process, never a fork, each file whole."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from iobench.errors import RunStorageError
from iobench.plots import files
from iobench.plots.figures import figure_builders
from iobench.results.assemble import build_frame
from iobench.store.rundir import RunDir

LAB = Path(__file__).resolve().parents[1] / "notebooks" / "lab-results"


def _figure() -> Figure:
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([1, 2, 3], [1, 4, 9])
    return fig


def test_every_figure_is_drawn_here_while_another_thread_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notebook's kernel and the CLI's live display have threads: drawing never forks."""

    def no_fork() -> int:
        raise AssertionError("forked while drawing")

    monkeypatch.setattr(os, "fork", no_fork)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        frame = build_frame(RunDir.open(LAB / "lab-numa"))  # the frame, built in memory: nothing written
        paths = files.write_figures(frame, tmp_path / "figs", ("png", "svg"))
    finally:
        stop.set()
    names = list(figure_builders(frame))
    assert len(names) >= 2
    assert paths == [tmp_path / "figs" / f"{name}.{fmt}" for name in names for fmt in ("png", "svg")]
    assert all(p.is_file() and p.stat().st_size > 1000 for p in paths)


def test_a_figure_that_cannot_be_written_raises_after_the_files_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[Path] = []

    def full_at_the_second(fig: object, path: Path) -> Path:
        if written:
            raise RunStorageError.from_os_error(OSError(28, "No space left on device"), str(path))
        written.append(path)
        path.write_bytes(b"x" * 2000)
        return path

    monkeypatch.setattr(files, "figure_builders", lambda frame: {"a": _figure, "b": _figure})
    monkeypatch.setattr(files, "save_figure_file", full_at_the_second)
    with pytest.raises(RunStorageError, match="no space left on device"):
        files.write_figures(pd.DataFrame(), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["a.png"]


def test_a_frame_without_data_draws_nothing(tmp_path: Path) -> None:
    assert files.write_figures(pd.DataFrame(), tmp_path / "none") == []
    assert not (tmp_path / "none").exists()
