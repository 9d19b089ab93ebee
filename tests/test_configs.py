"""Every shipped matrix validates and plans on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from iobench.matrix import load_matrix
from iobench.plan import plan

pytestmark = pytest.mark.fio
CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))


@pytest.fixture(scope="module")
def two_node_box(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sysfs_snapshots import SnapshotCache

    return SnapshotCache(tmp_path_factory).root("32em64t-2n8c+dax+nvme+mic+dimms")


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_plans_on_a_real_two_node_snapshot(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_node_box: Path
) -> None:
    monkeypatch.setenv("IOBENCH_DEMO_DIR", str(tmp_path))
    p = plan(load_matrix(path), fsroot=two_node_box)
    assert p.runs and any(r.status == "run" for r in p.runs)
    assert all(r.reason for r in p.runs if r.status == "skipped")


def test_demo_is_a_real_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOBENCH_DEMO_DIR", str(tmp_path))
    m = load_matrix(Path(__file__).parents[1] / "configs" / "demo.yaml")
    assert len(m.combos) >= 12 and {"bs", "iodepth", "numjobs"} <= set(m.axes)
    assert m.targets[0].path == str(tmp_path / "iobench-demo.dat")
    p = plan(m)
    assert p.expected_s is not None and p.expected_s <= 120
