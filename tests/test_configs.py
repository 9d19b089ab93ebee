"""Every shipped matrix validates and plans on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from iobench.matrix import load_matrix
from iobench.plan import plan

pytestmark = pytest.mark.fio
CONFIGS = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_plans(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOBENCH_DEMO_DIR", str(tmp_path))
    m = load_matrix(path)
    p = plan(m)
    assert p.runs and any(r.status == "run" for r in p.runs)


def test_demo_is_a_real_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IOBENCH_DEMO_DIR", str(tmp_path))
    m = load_matrix(Path(__file__).parents[1] / "configs" / "demo.yaml")
    assert len(m.combos) >= 12 and {"bs", "iodepth", "numjobs"} <= set(m.axes)
    assert m.targets[0].path == str(tmp_path / "iobench-demo.dat")
    p = plan(m)
    assert p.expected_s is not None and p.expected_s <= 120
