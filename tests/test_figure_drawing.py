"""Figures drawn in forked children (plots/files.py), and the base frame they are drawn from at the end of a run."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from iobench.errors import RunStorageError
from iobench.plots import files
from iobench.plots.figures import figure_builders
from iobench.results.assemble import base_frame, build_frame
from iobench.store.rundir import RunDir

LAB = Path(__file__).resolve().parents[1] / "notebooks" / "lab-results"
TWO_CPUS = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="children are forked only with 2+ CPUs"
)


def _figure() -> Figure:
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([1, 2, 3], [1, 4, 9])
    return fig


def _builder_failing_in_children(parent: int) -> Figure:
    if os.getpid() != parent:
        raise RuntimeError("only in a child")
    return _figure()


@TWO_CPUS
def test_each_figure_is_drawn_by_a_child_and_waited_for(tmp_path: Path) -> None:
    jobs: list[files.Job] = [(_figure, [tmp_path / f"f{i}.png", tmp_path / f"f{i}.svg"]) for i in range(3)]
    assert files.FigureDrawing(jobs, {}).wait() == [
        p for _, paths in jobs for p in paths
    ]  # no child: drawn here
    frame = build_frame(RunDir.open(LAB / "lab-numa"))  # the frame, built in memory: nothing written
    drawing = files.start_figures(frame, tmp_path / "figs")
    assert len(drawing.children) == len(figure_builders(frame)) >= 2
    paths = drawing.wait()
    assert paths and all(p.is_file() and p.stat().st_size > 1000 for p in paths)
    assert drawing.children == {}


@TWO_CPUS
def test_what_a_child_failed_to_draw_is_drawn_again_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = os.getpid()
    builders = {"a": lambda: _builder_failing_in_children(parent), "b": _figure}
    monkeypatch.setattr(files, "figure_builders", lambda frame: builders)
    drawing = files.start_figures(pd.DataFrame(), tmp_path)
    assert len(drawing.children) == 2
    assert [p.name for p in drawing.wait()] == ["a.png", "b.png"]
    assert (tmp_path / "a.png").stat().st_size > 1000


def test_a_figure_that_cannot_be_written_raises_from_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fig: object, path: object) -> None:
        raise RunStorageError.from_os_error(OSError(28, "No space left on device"), str(path))

    monkeypatch.setattr(files, "figure_builders", lambda frame: {"a": _figure, "b": _figure})
    monkeypatch.setattr(files, "save_figure_file", full)
    drawing = files.start_figures(pd.DataFrame(), tmp_path)
    with pytest.raises(RunStorageError, match="no space left on device"):
        drawing.wait()


@TWO_CPUS
def test_cancel_leaves_no_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def slow() -> Figure:
        time.sleep(60)
        return _figure()

    monkeypatch.setattr(files, "figure_builders", lambda frame: {"a": slow, "b": slow})
    drawing = files.start_figures(pd.DataFrame(), tmp_path)
    pids = list(drawing.children)
    started = time.monotonic()
    drawing.cancel()
    assert time.monotonic() - started < 10 and drawing.children == {}
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


@pytest.mark.parametrize("run", ["lab-numa", "lab-smt", "lab-settings"])
def test_the_base_frame_is_the_frame_without_telemetry_and_steady_state(run: str, tmp_path: Path) -> None:
    """The end-of-run figures start from base_frame: the same figures as from the finished frame."""
    directory = RunDir(LAB / run)
    base, final = base_frame(directory), build_frame(directory)
    assert list(figure_builders(base)) == list(figure_builders(final))
    assert base.attrs == final.attrs
    shared = [c for c in final.columns if c in base.columns]
    assert shared == list(base.columns)  # same order, only columns added
    pd.testing.assert_frame_equal(base, final[shared])
    pd.testing.assert_frame_equal(build_frame(directory, base=base), final)
