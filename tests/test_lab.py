"""The lab (issue 7): NUMA, SMT, device settings and the write guard on a booted 2-socket SMT guest.

One guest boot per session runs every sweep (``lab/guest.py``); each check of
``lab/checks.py`` is then one test here, so a failure names what the machine
did wrong. Placement is judged from the CPUs /proc showed each fio worker.
Skipped, with the reason, where qemu or the guest kernel cannot be had.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.checks import CHECKS, Check
from lab.machine import LabUnavailable
from lab.run import LabRun, run_lab

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory: pytest.TempPathFactory) -> LabRun:
    try:
        return run_lab(tmp_path_factory.mktemp("lab"))
    except LabUnavailable as exc:
        pytest.skip(f"the lab cannot run here: {exc}")


def _named(lab_run: LabRun, name: str) -> Check:
    return next(c for c in lab_run.checks if c.name == name)


def test_the_guest_booted_ran_and_powered_off(lab_run: LabRun) -> None:
    assert lab_run.qemu_returncode == 0, (lab_run.out / "console.log").read_text(errors="replace")[-3000:]
    assert [c.name for c in lab_run.checks] == [check.__name__.replace("_", " ") for check in CHECKS]


@pytest.mark.parametrize("name", [check.__name__.replace("_", " ") for check in CHECKS])
def test_lab_check(lab_run: LabRun, name: str) -> None:
    check = _named(lab_run, name)
    assert check.passed, check.detail


def test_results_came_back_as_run_directories(lab_run: LabRun) -> None:
    runs = sorted(p.name.rsplit("-", 2)[0] for p in (lab_run.out / "runs").iterdir())
    assert runs == ["lab-home-node", "lab-numa", "lab-settings", "lab-smt", "lab-unknown-home"]
    assert all((p / "results.parquet").is_file() for p in (lab_run.out / "runs").iterdir())
    assert Path(lab_run.out / "checks.json").is_file()
