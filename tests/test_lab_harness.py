"""The lab harness without booting: what it does when QEMU itself crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import machine, run


@pytest.fixture
def no_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(machine, "ensure_packages", lambda: None)
    monkeypatch.setattr(machine, "fetch_kernel", lambda: machine.Kernel("0-test", tmp_path / "kernel"))
    monkeypatch.setattr(machine, "build_initramfs", lambda kernel, out: tmp_path / "initramfs")


def booting(monkeypatch: pytest.MonkeyPatch, returncodes: list[int]) -> list[Path]:
    """QEMU's exit codes, one per boot; each boot leaves a console log in its folder."""
    outs: list[Path] = []

    def boot(kernel: machine.Kernel, initramfs: Path, out: Path, timeout: float) -> int:
        outs.append(out)
        (out / "console.log").write_text(f"boot {len(outs)}\n")
        return returncodes[len(outs) - 1]

    monkeypatch.setattr(run, "_boot", boot)
    return outs


@pytest.mark.usefixtures("no_setup")
def test_a_qemu_crash_boots_a_fresh_guest_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    outs = booting(monkeypatch, [-11, 0])
    lab = run.run_lab(tmp_path / "results")
    assert len(outs) == 2 and lab.out == outs[1] and lab.qemu_returncode == 0
    [crash] = lab.crashes
    assert "SIGSEGV" in crash
    kept = Path(crash.rsplit("its logs: ", 1)[1])
    assert kept.name == f"{lab.out.name}-qemu-crash-1"
    assert (kept / "console.log").read_text() == "boot 1\n"  # the crashed boot's logs are kept apart
    assert (lab.out / "console.log").read_text() == "boot 2\n"
    [check] = lab.checks  # the second boot's folder is the one checked: it has no lab.json
    assert str(lab.out / "lab.json") in check.detail


@pytest.mark.usefixtures("no_setup")
def test_a_second_crash_or_a_timeout_is_the_result(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    booting(monkeypatch, [-11, -6])
    lab = run.run_lab(tmp_path / "twice")
    assert lab.qemu_returncode == -6 and len(lab.crashes) == 1 and not lab.passed
    outs = booting(monkeypatch, [124])
    lab = run.run_lab(tmp_path / "slow")
    assert len(outs) == 1 and lab.qemu_returncode == 124 and lab.crashes == []
