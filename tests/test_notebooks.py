"""The notebook: one parameter cell, runs top to bottom on any run directory, prose from the data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from iobench.matrix.model import load_matrix
from iobench.results.loading import load
from iobench.runner.sweep import run

ROOT = Path(__file__).parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DEMO = ROOT / "configs" / "demo.yaml"


def parameter_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", [])]


def execute(
    path: Path, runs: list[str] | None = None, history: str | None = None
) -> list[nbformat.NotebookNode]:
    """The outputs of ``path`` run top to bottom, its parameter cell set to ``runs`` and its history
    store to ``history`` when given."""
    notebook = nbformat.read(path, as_version=4)
    if runs is not None:
        [cell] = parameter_cells(notebook)
        cell.source = f"RUNS = {runs!r}"
    if history is not None:
        [cell] = [c for c in notebook.cells if c.source.startswith("HISTORY = None")]
        cell.source = cell.source.replace("HISTORY = None", f"HISTORY = {history!r}", 1)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]


def prose(outputs: list[nbformat.NotebookNode]) -> list[str]:
    return [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]


def test_there_is_a_notebook() -> None:
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_has_one_parameter_cell_naming_the_runs_and_no_other_path(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    [cell] = parameter_cells(notebook)
    assert re.fullmatch(r"(#[^\n]*\n)*RUNS = \[[^\]]*\]", cell.source.strip())
    others = "\n".join(c.source for c in notebook.cells if c.cell_type == "code" and c is not cell)
    assert "lab-results" not in others and "results/" not in others


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom_on_the_shipped_runs_and_draws(path: Path) -> None:
    outputs = execute(path)
    assert not [o for o in outputs if o.output_type == "error"]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= 4
    said = "\n".join(prose(outputs))
    for name in ("lab-numa", "lab-smt", "lab-settings"):
        points = load(path.parent / "lab-results" / name)["point"].nunique()
        assert f"**{name}**: {points} points" in said


@pytest.mark.fio
def test_notebook_reads_a_fresh_demo_run_with_skipped_and_failed_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configs/demo.yaml with `remote` added (skipped on one NUMA node), 1-s points, one point failed."""
    text = DEMO.read_text()
    text = re.sub(r"binding: \[[^\]]*\]", "binding: [local, none, remote]", text)
    text = text.replace("runtime: 2", "runtime: 1").replace("ramp_time: 1", "ramp_time: 0")
    text = text.replace("size: 256M", "size: 16M")
    (tmp_path / "demo.yaml").write_text(text)
    monkeypatch.setenv("IOBENCH_DEMO_DIR", str(tmp_path))
    run_dir = run(load_matrix(tmp_path / "demo.yaml"), out=tmp_path / "results").run_dir
    meta_path = run_dir / "points" / "0001-r1" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta.update(status="failed", reason="fio exited with status 1: boom")
    meta_path.write_text(json.dumps(meta))
    (run_dir / "results.parquet").unlink()
    frame = load(run_dir)

    from iobench.answers import history

    store = tmp_path / "history"
    history.add(store, [run_dir])
    outputs = execute(NOTEBOOKS[0], [str(run_dir)], str(store))
    assert not [o for o in outputs if o.output_type == "error"]
    assert [o for o in outputs if "image/png" in o.get("data", {})]
    said = "\n".join(prose(outputs))
    runs = frame.drop_duplicates(["point", "repeat"])
    counts = runs["status"].value_counts()
    assert f"**{run_dir.name}**: {runs['point'].nunique()} points, {len(runs)} point-runs" in said
    for status, n in counts.items():
        assert f"{n} {status}" in said
    assert "failed (1 point-runs, points 1): fio exited with status 1: boom" in said
    if counts.get("skipped"):
        assert "binding remote" in said
    series = history.load(store)["series"].nunique()
    assert f"1 runs, {series} series, 0 changes" in said
