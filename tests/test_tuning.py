"""Device queue settings: validation, journal, apply/restore, and recovery after kills.

A journal decides what ``iobench restore`` writes and which host it reaches, so it is acted
on only when its folder, owner, mode and content check out.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopdev import Loop, LoopFactory
from otheruser import OTHER, as_other, others_state_home

from iobench.errors import SafetyError, TuningError
from iobench.system import tuning
from iobench.system.tuning import (
    DeviceTuner,
    check_no_pending,
    drop_caches,
    offered_schedulers,
    pending_journals,
    read_settings,
    restore_from_journals,
    validate,
)

# --- a fake sysfs tree -----------------------------------------------------------


def fake_disk(
    sysfs: Path, disk: str = "sda", scheduler: str = "none [mq-deadline] kyber", readahead: int = 128
) -> Path:
    queue = sysfs / "block" / disk / "queue"
    queue.mkdir(parents=True)
    (queue / "scheduler").write_text(scheduler + "\n")
    (queue / "read_ahead_kb").write_text(f"{readahead}\n")
    (queue.parent / "dev").write_text("8:0\n")
    return queue


def test_reads_the_bracketed_scheduler_and_readahead(tmp_path: Path) -> None:
    fake_disk(tmp_path)
    assert read_settings("sda", sysfs=tmp_path) == {"scheduler": "mq-deadline", "readahead_kb": 128}
    assert offered_schedulers("sda", tmp_path) == ("none", "mq-deadline", "kyber")


def test_a_disk_without_choice_prints_none_without_brackets(tmp_path: Path) -> None:
    fake_disk(tmp_path, scheduler="none")
    assert read_settings("sda", sysfs=tmp_path)["scheduler"] == "none"


def test_validate_reports_each_problem_naming_the_disk(tmp_path: Path) -> None:
    fake_disk(tmp_path)
    fake_disk(tmp_path, "sdb")
    (tmp_path / "block" / "sdb" / "queue" / "read_ahead_kb").chmod(0o444)
    problems = validate(
        {
            "sda": {"scheduler": "bfq", "readahead_kb": -1},
            "sdb": {"readahead_kb": 64},
            "sda1": {"scheduler": "none"},
        },
        tmp_path,
    )
    assert problems == [
        "sda does not offer scheduler 'bfq'; it offers none, mq-deadline, kyber",
        "sda: readahead_kb -1 is not a whole number of KiB ≥ 0",
        f"sdb: {tmp_path}/block/sdb/queue/read_ahead_kb is not writable; retry as root",
        f"sda1 has no {tmp_path}/block/sda1/queue: device settings need a whole block disk",
    ]


@pytest.mark.parametrize("value", ["128", True, 1.5])
def test_validate_wants_an_int_readahead(tmp_path: Path, value: object) -> None:
    fake_disk(tmp_path)
    assert validate({"sda": {"readahead_kb": value}}, tmp_path) == [
        f"sda: readahead_kb {value!r} is not a whole number of KiB ≥ 0"
    ]


def test_validate_accepts_what_can_be_applied_and_changes_nothing(tmp_path: Path) -> None:
    queue = fake_disk(tmp_path)
    assert validate({"sda": {"scheduler": "kyber", "readahead_kb": 0}}, tmp_path) == []
    assert (queue / "scheduler").read_text() == "none [mq-deadline] kyber\n"


def test_validate_rejects_unknown_settings_and_odd_names(tmp_path: Path) -> None:
    fake_disk(tmp_path)
    assert validate({"sda": {"nr_requests": 4}, "../etc": {"readahead_kb": 1}}, tmp_path) == [
        "unknown device setting 'nr_requests'; iobench sets scheduler, readahead_kb",
        "'../etc' is not a disk name (expected e.g. sda, nvme0n1, loop0)",
    ]


def test_a_refused_write_names_disk_setting_value_errno_and_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_disk(tmp_path)

    def refuse(*args: object, **kwargs: object) -> int:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(TuningError, match=r"set readahead_kb of sda to 0 .*EACCES\); retry as root"):
        tuning.write_setting("sda", "readahead_kb", 0, sysfs=tmp_path)


def test_a_kernel_refusal_names_the_errno_without_root_hint(tmp_path: Path) -> None:
    queue = fake_disk(tmp_path)
    (queue / "scheduler").unlink()
    (queue / "scheduler").mkdir()
    with pytest.raises(TuningError, match=r"set scheduler of sda to 'none' .*\(EISDIR\)$"):
        tuning.write_setting("sda", "scheduler", "none", sysfs=tmp_path)


def test_tuner_journals_once_then_restores_and_removes_the_journal(tmp_path: Path) -> None:
    queue = fake_disk(tmp_path)
    with DeviceTuner(sysfs=tmp_path, run_dir="runs/1") as tuner:
        tuner.apply("sda", scheduler="kyber")
        (journal,) = pending_journals()
        assert journal.originals == {"scheduler": "mq-deadline", "readahead_kb": 128}
        assert (journal.disk, journal.dev, journal.pid, journal.run_dir) == (
            "sda",
            "8:0",
            os.getpid(),
            "runs/1",
        )
        effective = tuner.apply("sda", readahead_kb=0)
        # The second change must not overwrite the originals with changed values.
        assert pending_journals()[0].originals == journal.originals
        assert effective == {"scheduler": "kyber", "readahead_kb": 0}
    assert (queue / "scheduler").read_text() == "mq-deadline"
    assert (queue / "read_ahead_kb").read_text() == "128"
    assert pending_journals() == []


def test_journal_file_is_complete_json(tmp_path: Path) -> None:
    fake_disk(tmp_path)
    with DeviceTuner(sysfs=tmp_path) as tuner:
        tuner.apply("sda", readahead_kb=4)
        data = json.loads((tuning.journal_dir() / "sda.json").read_text())
    assert set(data) == {
        "version",
        "disk",
        "dev",
        "originals",
        "pid",
        "pid_start_ticks",
        "started",
        "run_dir",
        "sysfs",
    }
    assert data["pid_start_ticks"] == tuning._proc_start_ticks(os.getpid())


def test_check_no_pending_names_the_disk_and_the_command(tmp_path: Path) -> None:
    fake_disk(tmp_path)
    check_no_pending(["sda"])
    tuner = DeviceTuner(sysfs=tmp_path)
    tuner.apply("sda", readahead_kb=0)
    check_no_pending(["sdb"])
    with pytest.raises(TuningError, match=r"^sda still has device settings .* run `iobench restore` first"):
        check_no_pending(["sdb", "sda"])
    # A second tuner must not journal the changed values as originals.
    with pytest.raises(TuningError, match="iobench restore"):
        DeviceTuner(sysfs=tmp_path).apply("sda", readahead_kb=8)
    tuner.restore()
    check_no_pending(["sda"])


def test_a_journal_of_a_live_run_is_left_to_it(tmp_path: Path) -> None:
    queue = fake_disk(tmp_path)
    with DeviceTuner(sysfs=tmp_path) as tuner:
        tuner.apply("sda", readahead_kb=0)
        (line,) = restore_from_journals()
        assert line.startswith(f"sda: not restored: iobench pid {os.getpid()} ")
        assert (queue / "read_ahead_kb").read_text() == "0"
        assert len(pending_journals()) == 1
    assert pending_journals() == []


def test_a_journal_of_a_dead_pid_is_restored(tmp_path: Path) -> None:
    queue = fake_disk(tmp_path)
    tuner = DeviceTuner(sysfs=tmp_path)
    tuner.apply("sda", scheduler="none", readahead_kb=0)
    path = tuning.journal_dir() / "sda.json"
    data = json.loads(path.read_text())
    data["pid_start_ticks"] = -1  # the pid was reused by another process
    path.write_text(json.dumps(data))
    assert restore_from_journals() == ["sda: restored scheduler mq-deadline, readahead_kb 128"]
    assert (queue / "scheduler").read_text() == "mq-deadline"
    assert pending_journals() == []


def test_a_journal_for_a_disk_now_numbered_otherwise_is_not_written(tmp_path: Path) -> None:
    queue = fake_disk(tmp_path)
    DeviceTuner(sysfs=tmp_path).apply("sda", readahead_kb=0)
    path = tuning.journal_dir() / "sda.json"
    data = json.loads(path.read_text())
    data["pid_start_ticks"] = -1
    path.write_text(json.dumps(data))
    (queue.parent / "dev").write_text("8:16\n")
    assert restore_from_journals() == [
        "sda: is now device 8:16, not 8:0; nothing to restore, journal removed"
    ]
    assert (queue / "read_ahead_kb").read_text() == "0"
    assert pending_journals() == []


def test_an_unreadable_journal_is_named(tmp_path: Path) -> None:
    tuning.journal_dir().mkdir(parents=True)
    (tuning.journal_dir() / "sda.json").write_text("{half")
    with pytest.raises(TuningError, match=r"sda.json: truncated or not JSON settings journal.*by hand"):
        pending_journals()


def test_drop_caches_writes_3_to_procfs(tmp_path: Path) -> None:
    vm = tmp_path / "sys" / "vm"
    vm.mkdir(parents=True)
    (vm / "drop_caches").write_text("0")
    drop_caches(proc=tmp_path)
    assert (vm / "drop_caches").read_text() == "3"


@pytest.mark.root
def test_drop_caches_on_this_machine() -> None:
    drop_caches()


# --- real loop devices -------------------------------------------------------------


def _other_values(loop: Loop) -> tuple[dict[str, str | int], dict[str, str | int]]:
    """The loop's defaults and values that differ from them in both settings."""
    original = read_settings(loop.name)
    scheduler = next(s for s in offered_schedulers(loop.name) if s != original["scheduler"])
    readahead = 0 if original["readahead_kb"] != 0 else 256
    return original, {"scheduler": scheduler, "readahead_kb": readahead}


@pytest.mark.loopdev
def test_apply_and_restore_on_a_loop_device(loops: LoopFactory) -> None:
    loop = loops.attach()
    original, wanted = _other_values(loop)
    with DeviceTuner() as tuner:
        effective = tuner.apply(loop.name, scheduler=str(wanted["scheduler"]), readahead_kb=0)
        assert read_settings(loop.name) == effective
        assert effective["scheduler"] == wanted["scheduler"]
        assert tuner.originals() == {loop.name: original}
    assert read_settings(loop.name) == original
    assert pending_journals() == []


@pytest.mark.loopdev
def test_applied_records_what_the_kernel_kept(loops: LoopFactory) -> None:
    loop = loops.attach()
    with DeviceTuner() as tuner:
        # readahead is kept in whole pages: 5 KiB becomes 4 KiB.
        assert tuner.apply(loop.name, readahead_kb=5)["readahead_kb"] == 4
        assert read_settings(loop.name)["readahead_kb"] == 4


@pytest.mark.loopdev
def test_an_unoffered_scheduler_fails_naming_it_and_restores(loops: LoopFactory) -> None:
    loop = loops.attach()
    original, _ = _other_values(loop)
    with pytest.raises(TuningError, match=rf"set scheduler of {loop.name} to 'no-such'.*EINVAL"):  # noqa: PT012
        with DeviceTuner() as tuner:
            tuner.apply(loop.name, readahead_kb=0)
            tuner.apply(loop.name, scheduler="no-such")
    assert read_settings(loop.name) == original
    assert validate({loop.name: {"scheduler": "no-such"}}, "/sys") == [
        f"{loop.name} does not offer scheduler 'no-such'; it offers {', '.join(offered_schedulers(loop.name))}"
    ]


@pytest.mark.loopdev
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_restores_on_exception_and_ctrl_c(loops: LoopFactory, error: type[BaseException]) -> None:
    loop = loops.attach()
    original, wanted = _other_values(loop)
    with pytest.raises(error), DeviceTuner() as tuner:  # noqa: PT012
        tuner.apply(loop.name, scheduler=str(wanted["scheduler"]), readahead_kb=int(wanted["readahead_kb"]))
        assert read_settings(loop.name) == wanted
        raise error
    assert read_settings(loop.name) == original
    assert pending_journals() == []


CHILD = """
import signal, sys, time
from iobench.system.tuning import DeviceTuner

def stop(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, stop)
try:
    with DeviceTuner() as tuner:
        tuner.apply({disk!r}, scheduler={scheduler!r}, readahead_kb={readahead!r})
        print("applied", flush=True)
        time.sleep(60)
except KeyboardInterrupt:
    sys.exit(130)
"""


@contextlib.contextmanager
def _tuning_child(loop: Loop, wanted: dict[str, str | int]) -> Iterator[subprocess.Popen[str]]:
    """A child python that applies ``wanted`` with a DeviceTuner and sleeps; killed on exit."""
    code = textwrap.dedent(CHILD).format(
        disk=loop.name, scheduler=wanted["scheduler"], readahead=wanted["readahead_kb"]
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "applied\n"
            yield child
        finally:
            child.kill()
            child.wait()


@pytest.mark.loopdev
def test_sigkilled_run_is_restored_from_its_journal(loops: LoopFactory) -> None:
    loop = loops.attach()
    original, wanted = _other_values(loop)
    with _tuning_child(loop, wanted) as child:
        (journal,) = pending_journals()
        assert journal.owner_alive() and journal.pid == child.pid
        assert restore_from_journals()[0].startswith(f"{loop.name}: not restored")
        assert read_settings(loop.name) == wanted
        child.kill()
        assert child.wait() == -signal.SIGKILL
    assert read_settings(loop.name) == wanted
    with pytest.raises(TuningError, match=rf"^{loop.name} still has device settings.*iobench restore"):
        check_no_pending([loop.name])
    assert restore_from_journals() == [
        f"{loop.name}: restored scheduler {original['scheduler']}, readahead_kb {original['readahead_kb']}"
    ]
    assert read_settings(loop.name) == original
    assert pending_journals() == []
    check_no_pending([loop.name])


@pytest.mark.loopdev
def test_sigterm_turned_into_keyboardinterrupt_restores_on_its_own(loops: LoopFactory) -> None:
    loop = loops.attach()
    original, wanted = _other_values(loop)
    with _tuning_child(loop, wanted) as child:
        assert read_settings(loop.name) == wanted
        child.terminate()
        assert child.wait(timeout=30) == 130
    assert read_settings(loop.name) == original
    assert pending_journals() == []


# --- journals someone else planted, or that hold what iobench never writes --------------------------


def _journal(host: dict[str, object] | None = None, **fields: object) -> str:
    data: dict[str, object] = {
        "version": 2,
        "disk": "sda",
        "dev": "8:0",
        "originals": {"scheduler": "mq-deadline", "readahead_kb": 128},
        "pid": 2**22 + 1,
        "pid_start_ticks": -1,
        "started": "2026-01-01T00:00:00+0000",
        "sysfs": "/sys",
        **fields,
    }
    if host is not None:
        data["host"] = host
    return json.dumps(data)


def _restore_cli() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "iobench", "restore"], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.root
def test_a_journal_planted_in_another_users_state_folder_is_never_acted_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sudo -E iobench restore`` with a user's state folder: their journal's ProxyCommand never runs as root."""
    marker = tmp_path / "pwned"
    with others_state_home() as home:
        host = {"destination": "root@127.0.0.1", "options": [f"ProxyCommand=touch {marker}"], "label": "a"}
        as_other(
            'mkdir -p "$1/iobench/journal" && printf %s "$2" >"$1/iobench/journal/a@sda.json"',
            str(home),
            _journal(host),
        )
        monkeypatch.setenv("XDG_STATE_HOME", str(home))
        done = _restore_cli()
    assert not marker.exists()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert f"folder {home} belongs to {OTHER}" in done.stderr and "mode 0755" in done.stderr


HOSTILE_HOSTS = {
    "proxy-command": (["ProxyCommand=touch {marker}"], "`ProxyCommand` is refused"),
    "hostname-in-a-jump": (
        ["HostName=x'$(touch {marker})'", "ProxyJump=root@127.0.0.1"],
        "`HostName` is refused",
    ),
    "local-command": (
        ["PermitLocalCommand=yes", "LocalCommand=touch {marker}"],
        "`PermitLocalCommand` is refused",
    ),
}


@pytest.mark.parametrize(("options", "named"), HOSTILE_HOSTS.values(), ids=HOSTILE_HOSTS.keys())
def test_restore_never_runs_an_ssh_option_it_did_not_check(
    options: list[str], named: str, tmp_path: Path
) -> None:
    """A journal in this user's own folder (an older iobench's, or one copied in) gets a matrix's checks."""
    marker = tmp_path / "pwned"
    host = {
        "destination": "root@127.0.0.1",
        "options": [o.format(marker=marker) for o in options],
        "label": "a",
    }
    tuning.journal_dir().mkdir(parents=True)
    path = tuning.journal_dir() / "a@sda.json"
    path.write_text(_journal(host))
    path.chmod(0o600)
    with pytest.raises(TuningError) as refused:
        restore_from_journals()
    assert not marker.exists()
    message = str(refused.value)
    assert message.startswith(f"{path}: its host is refused as a matrix's would be: ssh option {named}"), (
        message
    )
    assert "by hand" in message
    assert path.exists()  # left for the user to look at


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"disk": "../sda"}, "disk '../sda' is not a disk name"),
        ({"sysfs": "relative/sys"}, "sysfs 'relative/sys' is not an absolute path"),
        ({"originals": {"scheduler": "none;reboot"}}, "scheduler 'none;reboot' is not"),
        ({"originals": {"readahead_kb": -1}}, "readahead_kb -1 is not"),
    ],
)
def test_a_journal_holding_what_iobench_never_writes_is_refused(
    fields: dict[str, object], named: str
) -> None:
    tuning.journal_dir().mkdir(parents=True)
    path = tuning.journal_dir() / "sda.json"
    path.write_text(_journal(**fields))
    with pytest.raises(TuningError, match=re.escape(f"{path}: {named}")):
        pending_journals()


@pytest.mark.parametrize("plant", ["symlink", "group-writable", "others", "huge"])
def test_a_journal_file_not_of_this_users_own_is_refused(plant: str, tmp_path: Path) -> None:
    tuning.journal_dir().mkdir(parents=True)
    path = tuning.journal_dir() / "sda.json"
    if plant == "symlink":
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(_journal())
        path.symlink_to(elsewhere)
        why = "cannot read the settings journal"
    elif plant == "huge":
        path.write_text(_journal(started="x" * tuning.JOURNAL_LIMIT_BYTES))
        why = "longer than"
    else:
        path.write_text(_journal())
        path.chmod(0o620 if plant == "group-writable" else 0o600)
        if plant == "others":
            os.chown(path, 65534, 65534)
        why = "not a settings journal of this user's"
    with pytest.raises(TuningError, match=why):
        pending_journals()


def test_a_journal_folder_others_may_write_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = tmp_path / "state"
    (home / "iobench" / "journal").mkdir(parents=True)
    (home / "iobench").chmod(0o777)
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    with pytest.raises(SafetyError, match=rf"folder {home / 'iobench'} belongs to root \(uid 0\), mode 0777"):
        pending_journals()
