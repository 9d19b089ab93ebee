"""The lab: NUMA, SMT, device settings and the write guard on a booted 2-socket SMT guest.

One guest boot per session runs every sweep (``lab/guest.py``); each check of
``lab/checks.py`` is then one test here, so a failure names what the machine
did wrong. Placement is judged from the CPUs /proc showed each fio worker.

Two ways not to get a result, kept apart:

- this machine cannot run the lab (``LabUnavailable``: no qemu and no root to
  install it, no network for the guest kernel): the tests skip with the reason,
  and under CI, where ``make deps`` installs qemu, that skip is a failure;
- the harness failed (``LabError``: unpacking the kernel, building the
  initramfs, QEMU, the guest, reading back its output): always a failure, with
  QEMU's output and the guest's logs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.checks import CHECKS, Check
from lab.machine import LabError, LabUnavailable
from lab.run import LabRun, guest_logs, run_lab

pytestmark = pytest.mark.lab
CHECK_NAMES = [check.__name__.replace("_", " ") for check in CHECKS]


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory: pytest.TempPathFactory) -> LabRun:
    try:
        return run_lab(tmp_path_factory.mktemp("lab"))
    except LabUnavailable as exc:
        pytest.skip(f"the lab cannot run here: {exc}")
    except LabError as exc:
        pytest.fail(f"the lab harness failed: {exc}", pytrace=False)


def _named(lab_run: LabRun, name: str) -> Check:
    found = [c for c in lab_run.checks if c.name == name]
    if not found:
        reported = "; ".join(f"{c.name}: {c.detail[:500]}" for c in lab_run.checks)
        pytest.fail(
            f"check {name!r} did not run (the guest reported: {reported})\n{guest_logs(lab_run.out)}",
            pytrace=False,
        )
    return found[0]


def test_the_guest_booted_ran_and_powered_off(lab_run: LabRun) -> None:
    assert lab_run.qemu_returncode == 0, "\n".join([*lab_run.crashes, guest_logs(lab_run.out)])
    assert [c.name for c in lab_run.checks] == CHECK_NAMES, guest_logs(lab_run.out)


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_lab_check(lab_run: LabRun, name: str) -> None:
    check = _named(lab_run, name)
    assert check.passed, check.detail


def test_results_came_back_as_run_directories(lab_run: LabRun) -> None:
    assert (lab_run.out / "runs").is_dir(), guest_logs(lab_run.out)
    runs = sorted(p.name.rsplit("-", 2)[0] for p in (lab_run.out / "runs").iterdir())
    assert runs == ["lab-home-node", "lab-numa", "lab-settings", "lab-shared", "lab-smt", "lab-unknown-home"]
    assert all((p / "results.parquet").is_file() for p in (lab_run.out / "runs").iterdir())
    assert Path(lab_run.out / "checks.json").is_file()
