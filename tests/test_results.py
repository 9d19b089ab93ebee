"""iobench.load: the frame from results.parquet, rebuilt from raw outputs when missing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import iobench
from iobench.errors import ResultsError
from iobench.matrix.model import load_matrix
from iobench.runner.sweep import run

pytestmark = pytest.mark.fio


@pytest.fixture
def run_dir(null_matrix: Callable[..., Path], tmp_path: Path) -> Path:
    return run(load_matrix(null_matrix()), out=tmp_path / "r").run_dir


def test_load_reads_the_saved_frame(run_dir: Path) -> None:
    frame = iobench.load(run_dir)
    pd.testing.assert_frame_equal(frame, pd.read_parquet(run_dir / "results.parquet"))
    assert len(frame) == 6 and frame["status"].eq("ok").all()


def test_load_rebuilds_a_missing_frame_from_the_raw_outputs(run_dir: Path) -> None:
    saved = iobench.load(run_dir)
    (run_dir / "results.parquet").unlink()
    rebuilt = iobench.load(run_dir)
    assert (run_dir / "results.parquet").is_file()
    pd.testing.assert_frame_equal(rebuilt, saved)


def test_a_newer_schema_is_refused_with_the_fix(run_dir: Path) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["schema_version"] = 99
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ResultsError, match="written by a newer iobench.*upgrade iobench"):
        iobench.load(run_dir)


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="not an iobench run directory"):
        iobench.load(tmp_path)


def test_summarize_a_real_run(null_matrix: Callable[..., Path], tmp_path: Path) -> None:
    result = run(load_matrix(null_matrix("repeat: 3\n")), out=tmp_path / "r")
    summary = iobench.summarize(iobench.load(result.run_dir))
    assert len(summary) == 4 and summary["n"].eq(3).all()
    assert (summary["iops_mean"] > 0).all() and summary["iops_ci95"].notna().all()
