"""Every shipped matrix validates and plans on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from loopdev import LoopFactory, loops  # noqa: F401

from iobench.errors import TuningError
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
    m = load_matrix(path)
    if "mq-deadline" in m.axes.get("scheduler", ()):
        # This 2012 kernel's nvme0n1 offers only "none": refused before anything runs.
        with pytest.raises(TuningError, match="nvme0n1.*mq-deadline"):
            plan(m, fsroot=two_node_box)
        return
    p = plan(m, fsroot=two_node_box)
    assert p.runs and any(r.status == "run" for r in p.runs)
    assert all(r.reason for r in p.runs if r.status == "skipped")


@pytest.mark.loopdev
@pytest.mark.root
@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_plans_here_on_a_loop_device(path: Path, loops: LoopFactory) -> None:  # noqa: F811
    loop = loops.attach(64)
    p = plan(load_matrix(path, targets=[loop.path], allow_write=[loop.path]), allow_write=[loop.path])
    assert p.runs and all(proc.targets == (loop.path,) for r in p.runs for proc in r.processes)
    for run in p.runs:
        assert set(run.settings) <= {loop.name}


def test_demo_is_a_real_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOBENCH_DEMO_DIR", str(tmp_path))
    m = load_matrix(Path(__file__).parents[1] / "configs" / "demo.yaml")
    assert len(m.combos) >= 12 and {"bs", "iodepth", "numjobs"} <= set(m.axes)
    assert m.targets[0].path == str(tmp_path / "iobench-demo.dat")
    p = plan(m)
    assert p.expected_s is not None and p.expected_s <= 120
