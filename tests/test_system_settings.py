"""``iobench system show | tune | reset``: the machine's settings that make storage numbers unstable."""

from __future__ import annotations

import errno
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from iobench.cli.commands import app
from iobench.errors import TuningError
from iobench.system import stability, tuning
from iobench.system.hostfs import SystemFileError, SystemRoot
from iobench.system.stability import SETTINGS, VERDICTS, UnchangeableSetting, reset, setting_facts, show, tune

CPU = "sys/devices/system/cpu"


def write(root: Path, path: str, text: str) -> Path:
    file = root / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text + "\n")
    return file


def untuned_machine(root: Path, *, cpus: int = 2) -> SystemRoot:
    """A machine with every setting the way a benchmark should not have it."""
    write(root, f"{CPU}/online", f"0-{cpus - 1}")
    for cpu in range(cpus):
        write(root, f"{CPU}/cpu{cpu}/cpufreq/scaling_governor", "powersave")
        write(root, f"{CPU}/cpu{cpu}/cpufreq/scaling_available_governors", "performance powersave")
        for index, (name, latency) in enumerate((("POLL", 0), ("C1", 2), ("C6", 133))):
            write(root, f"{CPU}/cpu{cpu}/cpuidle/state{index}/name", name)
            write(root, f"{CPU}/cpu{cpu}/cpuidle/state{index}/latency", str(latency))
            write(root, f"{CPU}/cpu{cpu}/cpuidle/state{index}/disable", "0")
    write(root, f"{CPU}/cpufreq/boost", "1")
    write(root, f"{CPU}/smt/control", "on")
    write(root, f"{CPU}/smt/active", "1")
    write(root, "sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never")
    write(root, "sys/kernel/mm/transparent_hugepage/defrag", "always defer [madvise] never")
    write(root, "sys/module/nvme/parameters/poll_queues", "0")
    write(root, "sys/block/nvme0n1/queue/io_poll", "0")
    write(root, "sys/block/nvme0n1/queue/write_cache", "write back")
    write(root, "proc/sys/kernel/numa_balancing", "1")
    write(root, "proc/sys/kernel/random/boot_id", "boot-1")
    write(root, "proc/swaps", "Filename\tType\tSize\tUsed\tPriority\n/dev/nvme0n1p3 partition 100 0 -2")
    write(root, "proc/sys/vm/swappiness", "60")
    write(root, "proc/4242/comm", "irqbalance")
    write(root, "proc/1/comm", "init")
    return SystemRoot(root)


def states(system: SystemRoot, disks: tuple[str, ...] = ("nvme0n1",)) -> dict[str, Any]:
    return {s.name: s for s in show(system, disks)}


def test_show_finds_every_trap_with_its_value_and_why(tmp_path: Path) -> None:
    found = states(untuned_machine(tmp_path))
    assert [s.name for s in SETTINGS] == list(found)
    verdicts = {name: s.verdict for name, s in found.items()}
    assert verdicts == {
        "cpu-governor": "warning",
        "cpu-boost": "warning",
        "c-states": "warning",
        "smt": "note",
        "thp": "warning",
        "irqbalance": "warning",
        "nvme-poll-queues": "note",
        "nvme-coalescing": "n/a",  # a fake tree has no controller to ask
        "write-cache": "note",
        "swap": "warning",
        "numa-balancing": "warning",
    }
    assert found["cpu-governor"].value == "powersave on CPUs 0-1"
    assert found["c-states"].value == "deepest enabled: C6 (133 µs) on CPUs 0-1"
    assert found["thp"].value == "enabled always, defrag madvise"
    assert found["irqbalance"].value == "running" and "pid 4242" in found["irqbalance"].note
    assert found["nvme-poll-queues"].value == "poll_queues=0, nvme0n1 io_poll 0"
    assert found["swap"].value == "/dev/nvme0n1p3 (swappiness 60)"
    assert "falls back to interrupts" in found["nvme-poll-queues"].note
    # the same as data, for the checks of points that have only the manifest (a host's)
    assert found["cpu-governor"].detail == {"governors": {"0": "powersave", "1": "powersave"}}
    assert found["nvme-poll-queues"].detail == {"poll_queues": 0, "io_poll": {"nvme0n1": 0}}
    assert found["thp"].detail == {}
    assert all(s.verdict in VERDICTS and s.note for s in found.values())


def test_a_tuned_machine_shows_no_warning(tmp_path: Path) -> None:
    system = untuned_machine(tmp_path)
    write(tmp_path, f"{CPU}/cpu0/cpufreq/scaling_governor", "performance")
    write(tmp_path, f"{CPU}/cpu1/cpufreq/scaling_governor", "performance")
    write(tmp_path, f"{CPU}/cpufreq/boost", "0")
    for cpu in (0, 1):
        write(tmp_path, f"{CPU}/cpu{cpu}/cpuidle/state2/disable", "1")
    write(tmp_path, "sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
    write(tmp_path, "proc/sys/kernel/numa_balancing", "0")
    write(tmp_path, "proc/swaps", "Filename\tType\tSize\tUsed\tPriority")
    (tmp_path / "proc/4242/comm").unlink()
    found = states(system)
    assert [n for n, s in found.items() if s.verdict == "warning"] == []
    assert found["c-states"].value == "deepest enabled: C1 (2 µs) on CPUs 0-1"


def test_a_machine_without_these_files_shows_na_with_the_reason(tmp_path: Path) -> None:
    found = states(SystemRoot(tmp_path), ())
    assert {s.verdict for s in found.values()} == {"n/a"}
    assert found["cpu-governor"].note.startswith("no cpufreq in sysfs")
    assert found["nvme-poll-queues"].note == "no NVMe driver loaded"


def test_tune_sets_what_runtime_allows_journals_it_and_reset_puts_it_back(tmp_path: Path) -> None:
    system = untuned_machine(tmp_path)
    before = {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    done = tune(system=system)
    assert done == [
        f"/{CPU}/cpu0/cpufreq/scaling_governor: powersave -> performance",
        f"/{CPU}/cpu1/cpufreq/scaling_governor: powersave -> performance",
        f"/{CPU}/cpufreq/boost: 1 -> 0",
        f"/{CPU}/cpu0/cpuidle/state2/disable: 0 -> 1",
        f"/{CPU}/cpu1/cpuidle/state2/disable: 0 -> 1",
        "/sys/kernel/mm/transparent_hugepage/enabled: always -> madvise",
        "/proc/sys/kernel/numa_balancing: 1 -> 0",
    ]
    after = states(system)
    assert {n for n, s in after.items() if s.verdict == "warning"} == {"irqbalance", "swap"}
    (journal,) = tuning.pending_journals()
    assert (journal.journal, journal.disk, journal.dev) == ("system", "system", "boot-1")
    assert journal.originals["sys/kernel/mm/transparent_hugepage/enabled"] == "always"
    assert reset(system=system) == ["system: restored 7 machine settings as they were"]
    thp = tmp_path / "sys/kernel/mm/transparent_hugepage/enabled"
    assert thp.read_text() == "always"  # the word written back (the kernel shows it as "[always] …")
    restored = {p: p.read_text().strip() for p in before if p != thp}
    assert restored == {p: t.strip() for p, t in before.items() if p != thp}
    assert tuning.pending_journals() == []
    assert reset(system=system) == []


def test_tuning_twice_keeps_the_first_originals(tmp_path: Path) -> None:
    system = untuned_machine(tmp_path)
    tune(["numa-balancing"], system=system)
    write(tmp_path, "proc/sys/kernel/numa_balancing", "2")  # someone changed it meanwhile
    tune(["numa-balancing"], system=system)
    (journal,) = tuning.pending_journals()
    assert journal.originals == {"proc/sys/kernel/numa_balancing": "1"}


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["smt"], r"smt: turning SMT off takes CPUs offline"),
        (["irqbalance", "numa-balancing"], r"irqbalance: it is a service"),
        (["nvme-poll-queues"], r"poll queues are a module parameter"),
        (["turbo"], r"no setting named 'turbo'; iobench system tune knows cpu-governor, "),
    ],
)
def test_tune_refuses_what_it_cannot_change_and_changes_nothing(
    tmp_path: Path, names: list[str], message: str
) -> None:
    system = untuned_machine(tmp_path)
    before = {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(UnchangeableSetting, match=message) as caught:
        tune(names, system=system)
    assert caught.value.exit_code == 2 and "nothing was changed" in str(caught.value)
    assert {p: p.read_text() for p in before} == before
    assert tuning.pending_journals() == []


def test_a_file_tune_cannot_write_is_named_and_nothing_changes(tmp_path: Path) -> None:
    system = untuned_machine(tmp_path)
    (tmp_path / "proc/sys/kernel/numa_balancing").chmod(0o444)
    with pytest.raises(
        UnchangeableSetting, match=r"/proc/sys/kernel/numa_balancing: not writable; retry as root"
    ):
        tune(system=system)
    assert (tmp_path / f"{CPU}/cpufreq/boost").read_text().strip() == "1"
    assert tuning.pending_journals() == []


def test_a_refused_write_puts_back_what_was_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = untuned_machine(tmp_path)
    real = SystemRoot.write_attribute

    def refuse_boost(self: SystemRoot, path: str | os.PathLike[str], text: str) -> None:
        if str(path).endswith("cpufreq/boost"):
            raise SystemFileError("write", path, OSError(errno.EINVAL, "Invalid argument"))
        real(self, path, text)

    monkeypatch.setattr(SystemRoot, "write_attribute", refuse_boost)
    with pytest.raises(TuningError, match=r"cannot write '0' to /.*boost: Invalid argument; .*put back"):
        tune(["cpu-governor", "cpu-boost"], system=system)
    assert (tmp_path / f"{CPU}/cpu0/cpufreq/scaling_governor").read_text().strip() == "powersave"
    assert tuning.pending_journals() == []


def test_iobench_restore_restores_the_machine_too(tmp_path: Path) -> None:
    system = untuned_machine(tmp_path)
    tune(["thp"], system=system)
    assert (tmp_path / "sys/kernel/mm/transparent_hugepage/enabled").read_text() == "madvise"
    assert tuning.restore_from_journals() == ["system: restored 1 machine settings as they were"]
    assert (tmp_path / "sys/kernel/mm/transparent_hugepage/enabled").read_text() == "always"


def test_after_a_reboot_nothing_is_written_back(tmp_path: Path) -> None:
    system = untuned_machine(tmp_path)
    tune(["numa-balancing"], system=system)
    write(tmp_path, "proc/sys/kernel/random/boot_id", "boot-2")
    assert reset(system=system) == [
        "system: rebooted since it was tuned; the boot's own settings stand, journal removed"
    ]
    assert (tmp_path / "proc/sys/kernel/numa_balancing").read_text() == "0"


def test_a_journal_naming_another_file_is_refused(tmp_path: Path) -> None:
    system = untuned_machine(tmp_path)
    tune(["numa-balancing"], system=system)
    (path,) = tuning.journal_dir().glob("*.json")
    data = json.loads(path.read_text())
    data["originals"] = {"etc/shadow": "x"}
    path.write_text(json.dumps(data))
    with pytest.raises(TuningError, match=r"names 'etc/shadow', a file iobench never changes"):
        tuning.pending_journals()


def test_the_system_journal_does_not_block_device_tuning(tmp_path: Path) -> None:
    tune(["numa-balancing"], system=untuned_machine(tmp_path))
    tuning.check_no_pending(["system", "sda"])


def test_setting_facts_list_label_and_value() -> None:
    saved = [s.to_json() for s in show(SystemRoot("/nonexistent"))]
    assert setting_facts(saved)["CPU frequency governor"] == "–"
    assert len(setting_facts(saved)) == len(SETTINGS)


def test_nvme_coalescing_is_read_from_the_admin_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    device = tmp_path / "nvme0"
    device.write_text("")
    asked: list[tuple[int, int]] = []

    def ioctl(fd: int, request: int, buffer: bytearray) -> int:
        fields = list(stability._PASSTHRU.unpack(bytes(buffer)))
        asked.append((request, fields[0], fields[10]))  # type: ignore[arg-type]
        fields[-1] = (3 << 8) | 9  # 300 µs or 10 entries
        buffer[:] = stability._PASSTHRU.pack(*fields)
        return 0

    monkeypatch.setattr(stability.fcntl, "ioctl", ioctl)
    assert stability.nvme_feature(str(device), 8) == (3 << 8) | 9
    assert asked == [(0xC0484E41, 0x0A, 8)]
    assert stability._PASSTHRU.size == 72 == struct.calcsize("=BBHIIIQQIIIIIIIIII")


def test_system_show_json_on_this_machine() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "iobench", "system", "show", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert [s["name"] for s in shown] == [s.name for s in SETTINGS]
    for item in shown:
        assert set(item) == {"name", "label", "value", "verdict", "note", "tunable", "detail"}
        assert item["verdict"] in VERDICTS
    live = {s["name"]: s for s in shown}
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists():
        assert live["thp"]["value"].startswith("enabled " + thp.read_text().split("[")[1].split("]")[0])


def test_system_show_prints_a_line_per_setting(tmp_path: Path) -> None:
    untuned_machine(tmp_path)
    result = CliRunner().invoke(app, ["system", "show", "--fsroot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "CPU frequency governor" in result.output and "warning" in result.output
    assert "tune sets performance" in result.output


def test_system_tune_of_a_fixed_setting_exits_2_and_says_why() -> None:
    # SMT is never tuned: safe to ask of this machine.
    result = CliRunner().invoke(app, ["system", "tune", "smt"])
    assert result.exit_code == 2
    assert "smt: turning SMT off takes CPUs offline" in result.output
    assert tuning.pending_journals() == []


def test_system_reset_without_a_journal_says_so() -> None:
    result = CliRunner().invoke(app, ["system", "reset"])
    assert result.exit_code == 0
    assert "nothing to reset" in result.output


def test_system_tune_and_reset_under_fsroot(tmp_path: Path) -> None:
    untuned_machine(tmp_path)
    tuned = CliRunner().invoke(app, ["system", "tune", "numa-balancing", "--fsroot", str(tmp_path)])
    assert tuned.exit_code == 0, tuned.output
    assert "/proc/sys/kernel/numa_balancing: 1 -> 0" in tuned.output
    assert "iobench system reset" in tuned.output
    back = CliRunner().invoke(app, ["system", "reset", "--fsroot", str(tmp_path)])
    assert back.exit_code == 0, back.output
    assert (tmp_path / "proc/sys/kernel/numa_balancing").read_text() == "1"
    assert os.environ["XDG_STATE_HOME"] in str(tuning.journal_dir())


@pytest.mark.fio
def test_every_run_records_the_machine_settings_in_its_manifest(
    fake_fio: type[Any], null_matrix: Any, tmp_path: Path
) -> None:
    from iobench.matrix.model import load_matrix
    from iobench.runner.sweep import run
    from iobench.store.rundir import RunDir

    result = run(load_matrix(null_matrix()), out=tmp_path, executor=fake_fio())
    saved = RunDir.open(result.run_dir).manifest().machine.system
    assert [s["name"] for s in saved] == [s.name for s in SETTINGS]
    assert all(s["verdict"] in VERDICTS for s in saved)


def test_tune_of_a_setting_this_machine_lacks_says_so_not_that_it_is_as_wanted(tmp_path: Path) -> None:
    untuned_machine(tmp_path)
    (tmp_path / "proc/sys/kernel/numa_balancing").unlink()  # a kernel without NUMA balancing
    result = CliRunner().invoke(app, ["system", "tune", "numa-balancing", "--fsroot", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "already" not in result.output
    assert result.output.startswith(
        "numa-balancing: not on this machine, nothing to tune (no kernel.numa_balancing"
    )
    write(tmp_path, "proc/sys/kernel/numa_balancing", "0")
    again = CliRunner().invoke(app, ["system", "tune", "numa-balancing", "--fsroot", str(tmp_path)])
    assert again.output == "numa-balancing: already as a benchmark wants it (off)\n"
