"""``iobench system show | tune | reset --hosts``, and each host's settings in a run's manifest.

The hosts are this machine (tests/fakehosts.py); where settings are changed,
each host's ``/sys`` and ``/proc`` are fake trees its agent reads (``root``), so
nothing of this machine is tuned. The same commands over real SSH, against
namespace hosts: ``test_system_hosts_netns.py``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakehosts import LocalConnection, LocalHosts, agent_on
from test_system_settings import CPU, untuned_machine, write
from typer.testing import CliRunner

from iobench.cli.commands import app
from iobench.system import hostsettings, remote, tuning
from iobench.system.fleet import HostSpec
from iobench.system.hostagent import HostAgent
from iobench.system.hostfs import SystemRoot
from iobench.system.hostsettings import NoSuchHost, reset_hosts, select_hosts, show_hosts, tune_hosts
from iobench.system.remote import RemoteRoot, fetch_snapshot
from iobench.system.ssh import SshTarget
from iobench.system.stability import SETTINGS, UnchangeableSetting, show

# Loading a matrix with hosts asks the installed fio which options it has.
pytestmark = pytest.mark.fio

THP = "sys/kernel/mm/transparent_hugepage/enabled"


def host_tree(root: Path, hostname: str) -> Path:
    """A host's sysfs and procfs with every setting the way a benchmark should not have it."""
    untuned_machine(root)
    write(root, "proc/sys/kernel/hostname", hostname)
    (root / "sys/class/nvme/nvme0").mkdir(parents=True)
    return root


@pytest.fixture
def trees(tmp_path: Path) -> dict[str, Path]:
    return {name: host_tree(tmp_path / f"tree-{name}", f"{name}-host") for name in ("a", "b")}


def fake_hosts(base: Path, trees: dict[str, Path], **extra: dict[str, object]) -> LocalHosts:
    """Hosts a and b on their fake trees, c unreachable (a refused connection)."""
    per_host: dict[str, dict[str, object]] = {name: {"root": tree} for name, tree in trees.items()}
    per_host["c"] = {"unreachable": "ssh: connect to host c port 22: Connection refused"}
    per_host.update(extra)
    return LocalHosts(base, **per_host)


def specs(*names: str) -> list[HostSpec]:
    return [HostSpec(SshTarget(f"root@{n}", (), n), ()) for n in names]


# --- the snapshot holds what system show reads -------------------------------------------------


def test_a_hosts_snapshot_holds_every_file_system_show_reads(trees: dict[str, Path], tmp_path: Path) -> None:
    tree = trees["a"]
    host = LocalConnection(SshTarget("root@a", (), "a"), tmp_path / "home", root=tree)
    with agent_on(host) as agent:
        snapshot = fetch_snapshot(agent, tmp_path / "snapshot")
        assert agent.asked == {"snapshot": 1}  # one request
    copied = [s.to_json() for s in show(snapshot.system, ("nvme0n1",))]
    assert copied == [s.to_json() for s in show(SystemRoot(tree), ("nvme0n1",))]
    assert {s["name"]: s["verdict"] for s in copied}["cpu-governor"] == "warning"
    assert host.calls == []  # no command but the agent


def test_this_machines_snapshot_shows_what_this_machine_shows(tmp_path: Path) -> None:
    host = LocalConnection(SshTarget("root@here", (), "here"), tmp_path / "home")
    with agent_on(host) as agent:
        snapshot = fetch_snapshot(agent, tmp_path / "snapshot")
    live = {s.name: s.to_json() for s in show(SystemRoot())}
    copied = {s.name: s.to_json() for s in show(snapshot.system)}
    if live["nvme-coalescing"]["verdict"] != "n/a" or "controller" in live["nvme-coalescing"]["note"]:
        del live["nvme-coalescing"], copied["nvme-coalescing"]  # asked of a controller here only
    assert copied == live


# --- show, tune and reset per host ----------------------------------------------------------------


def test_show_reads_each_host_from_one_snapshot_and_names_a_failed_host(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    write(trees["b"], f"{CPU}/cpu0/cpufreq/scaling_governor", "performance")
    write(trees["b"], f"{CPU}/cpu1/cpufreq/scaling_governor", "performance")
    hosts = fake_hosts(tmp_path / "homes", trees)
    a, b, c = show_hosts(specs("a", "b", "c"), connector=hosts)
    assert (a.name, b.name, c.name) == ("a", "b", "c")
    assert [s.name for s in a.states] == [s.name for s in SETTINGS]
    assert {s.name: s.value for s in a.states}["cpu-governor"] == "powersave on CPUs 0-1"
    assert {s.name: s.value for s in b.states}["cpu-governor"] == "performance on CPUs 0-1"
    assert a.problem is None and b.problem is None
    assert c.states == () and c.problem == (
        "host c (root@c) is unreachable: ssh: connect to host c port 22: Connection refused"
    )
    for name in ("a", "b"):
        # nothing runs there but the agent
        assert hosts.made[name].calls == [] and [argv[0] for argv in hosts.made[name].started] == ["python3"]
    assert all(connection.closed for connection in hosts.made.values())


def test_a_host_without_a_name_is_named_by_its_hostname(trees: dict[str, Path], tmp_path: Path) -> None:
    hosts = LocalHosts(tmp_path / "homes", **{"root@a": {"root": trees["a"]}})
    (outcome,) = show_hosts([HostSpec(SshTarget("root@a", (), ""), ())], connector=hosts)
    assert outcome.name == "a-host" and outcome.destination == "root@a"
    assert outcome.who == "host a-host (root@a)"


def test_tune_and_reset_each_host_journaled_under_it(trees: dict[str, Path], tmp_path: Path) -> None:
    before = {name: (tree / THP).read_text() for name, tree in trees.items()}
    a, b, c = tune_hosts(specs("a", "b", "c"), connector=fake_hosts(tmp_path / "homes", trees))
    assert f"/{CPU}/cpu0/cpufreq/scaling_governor: powersave -> performance" in a.done
    assert "/sys/kernel/mm/transparent_hugepage/enabled: always -> madvise" in b.done
    assert c.done == () and c.problem is not None and "is unreachable" in c.problem
    for tree in trees.values():
        assert (tree / THP).read_text() == "madvise"
        assert (tree / f"{CPU}/cpu1/cpuidle/state2/disable").read_text() == "1"
    journals = {j.host["label"]: j for j in tuning.pending_journals() if j.host is not None}
    assert set(journals) == {"a", "b"} and len(tuning.pending_journals()) == 2
    assert journals["a"].journal == "system" and journals["a"].host == SshTarget("root@a", (), "a").to_json()
    assert journals["a"].originals[THP] == "always"
    back = reset_hosts(specs("a", "b", "c"), connector=fake_hosts(tmp_path / "again", trees))
    assert [o.done for o in back] == [
        ("a:system: restored 7 machine settings as they were",),
        ("b:system: restored 7 machine settings as they were",),
        (),
    ]
    assert back[2].problem is None  # nothing pending for c: it is not even reached
    assert {name: (tree / THP).read_text() for name, tree in trees.items()} == dict.fromkeys(before, "always")
    assert tuning.pending_journals() == []


def test_a_host_that_cannot_be_tuned_changes_nothing_there_and_the_others_are_tuned(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    (trees["b"] / "proc/sys/kernel/numa_balancing").chmod(0o444)
    a, b = tune_hosts(specs("a", "b"), connector=fake_hosts(tmp_path / "homes", trees))
    assert a.problem is None and a.done
    assert b.done == () and b.problem is not None
    assert b.problem.startswith("host b (root@b): cannot tune, nothing was changed:")
    assert "/proc/sys/kernel/numa_balancing: not writable; retry as root" in b.problem
    assert (trees["b"] / THP).read_text().strip() == "[always] madvise never"
    assert [j.host["label"] for j in tuning.pending_journals() if j.host is not None] == ["a"]


def test_a_setting_that_cannot_be_tuned_is_refused_before_any_host_is_reached(
    trees: dict[str, Path], tmp_path: Path
) -> None:
    hosts = fake_hosts(tmp_path / "homes", trees)
    with pytest.raises(UnchangeableSetting, match=r"smt: turning SMT off"):
        tune_hosts(specs("a", "b"), ["smt"], connector=hosts)
    assert hosts.made == {}


def test_iobench_restore_reaches_each_tuned_host(
    trees: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tune_hosts(specs("a", "b"), ["thp"], connector=fake_hosts(tmp_path / "homes", trees))
    reached: list[str] = []

    @contextlib.contextmanager
    def fake_remote_root(record: dict[str, Any]) -> Iterator[RemoteRoot]:
        target = SshTarget.from_json(record)
        reached.append(target.label)
        home = tmp_path / "restore" / target.label
        agent = HostAgent(LocalConnection(target, home, root=trees[target.label])).start()
        try:
            yield RemoteRoot(agent)
        finally:
            agent.close()

    monkeypatch.setattr(remote, "remote_root", fake_remote_root)
    result = CliRunner().invoke(app, ["restore"])
    assert result.exit_code == 0, result.output
    assert "a:system: restored 1 machine settings as they were" in result.output
    assert "b:system: restored 1 machine settings as they were" in result.output
    assert sorted(reached) == ["a", "b"]
    assert all((tree / THP).read_text() == "always" for tree in trees.values())
    assert tuning.pending_journals() == []


def test_hosts_are_chosen_by_name_or_destination() -> None:
    chosen = specs("a", "b") + [HostSpec(SshTarget("root@10.0.0.3", (), ""), ())]
    assert select_hosts(chosen, []) == chosen
    assert select_hosts(chosen, ["b", "root@10.0.0.3"]) == chosen[1:]
    with pytest.raises(NoSuchHost, match=r"no host named 'z' in the matrix; its hosts: a, b, root@10.0.0.3"):
        select_hosts(chosen, ["z"])


# --- the command line ---------------------------------------------------------------------------------


def hosts_matrix(write_matrix: Callable[..., Path], tmp_path: Path) -> Path:
    return write_matrix(
        textwrap.dedent(
            f"""\
            version: 1
            name: system-hosts
            fio: {{ioengine: null, rw: randread, bs: 4k, runtime: 1, time_based: 1}}
            hosts:
              - {{name: a, ssh: root@a, targets: [{{path: {tmp_path}/a.dat, size: 8M}}]}}
              - {{name: b, ssh: root@b, targets: [{{path: {tmp_path}/b.dat, size: 8M}}]}}
              - {{name: c, ssh: root@c, targets: [{{path: {tmp_path}/c.dat, size: 8M}}]}}
            matrix:
              iodepth: [1]
            """
        ),
        "hosts.yaml",
    )


@pytest.fixture
def cli_hosts(trees: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[LocalHosts]:
    made: list[LocalHosts] = []

    def connector(target: SshTarget, control: Path) -> LocalConnection:
        if not made:
            made.append(fake_hosts(tmp_path / f"homes{len(made)}", trees))
        return made[-1](target, control)

    monkeypatch.setattr(hostsettings, "ssh_connector", connector)
    return made


def test_system_show_hosts_prints_a_section_per_host_and_fails_for_one(
    write_matrix: Callable[..., Path], tmp_path: Path, cli_hosts: list[LocalHosts]
) -> None:
    matrix = hosts_matrix(write_matrix, tmp_path)
    result = CliRunner().invoke(app, ["system", "show", "--hosts", str(matrix)])
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert out.index("host a (root@a)") < out.index("host b (root@b)")
    assert "CPU frequency governor" in out and "powersave on CPUs 0-1" in out
    assert f"iobench system tune --hosts {matrix} --host a" in out
    assert "host c (root@c) is unreachable" in result.stderr
    assert "1 of 3 hosts failed" in result.stderr


def test_an_unnamed_host_is_shown_by_its_hostname_and_chosen_by_its_destination(
    write_matrix: Callable[..., Path], tmp_path: Path, trees: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    matrix = write_matrix(
        f"version: 1\nname: unnamed\nfio: {{ioengine: null}}\n"
        f"hosts: [{{ssh: root@a, targets: [{{path: {tmp_path}/a.dat, size: 8M}}]}}]\n"
    )
    hosts = LocalHosts(tmp_path / "homes", **{"root@a": {"root": trees["a"]}})
    monkeypatch.setattr(hostsettings, "ssh_connector", hosts)
    result = CliRunner().invoke(app, ["system", "show", "--hosts", str(matrix), "--host", "root@a"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("host a-host (root@a)\n")
    assert f"`iobench system tune --hosts {matrix} --host root@a` changes cpu-governor" in result.stdout


def test_system_show_hosts_json_has_an_object_per_host(
    write_matrix: Callable[..., Path], tmp_path: Path, cli_hosts: list[LocalHosts]
) -> None:
    matrix = hosts_matrix(write_matrix, tmp_path)
    result = CliRunner().invoke(app, ["system", "show", "--hosts", str(matrix), "--host", "a", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert list(shown) == ["a"]
    assert shown["a"]["ssh"] == "root@a"
    assert [s["name"] for s in shown["a"]["settings"]] == [s.name for s in SETTINGS]
    failed = CliRunner().invoke(app, ["system", "show", "--hosts", str(matrix), "--host", "c", "--json"])
    assert failed.exit_code == 1
    assert json.loads(failed.stdout) == {
        "c": {
            "ssh": "root@c",
            "problem": "host c (root@c) is unreachable: ssh: connect to host c port 22: Connection refused",
        }
    }


def test_system_tune_and_reset_hosts_on_the_command_line(
    write_matrix: Callable[..., Path], tmp_path: Path, cli_hosts: list[LocalHosts], trees: dict[str, Path]
) -> None:
    matrix = hosts_matrix(write_matrix, tmp_path)
    tuned = CliRunner().invoke(app, ["system", "tune", "thp", "--hosts", str(matrix)])
    assert tuned.exit_code == 1, tuned.output
    assert "host a (root@a)\n  /sys/kernel/mm/transparent_hugepage/enabled: always -> madvise" in tuned.stdout
    assert "host c (root@c) is unreachable" in tuned.stderr
    assert all((tree / THP).read_text() == "madvise" for tree in trees.values())
    cli_hosts.clear()
    back = CliRunner().invoke(app, ["system", "reset", "--hosts", str(matrix), "--host", "a", "--host", "b"])
    assert back.exit_code == 0, back.output
    assert "a:system: restored 1 machine settings as they were" in back.stdout
    assert all((tree / THP).read_text() == "always" for tree in trees.values())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["system", "show", "--host", "a"], "--host names a host of --hosts MATRIX"),
        (["system", "show", "--hosts", "{matrix}", "--host", "z"], "no host named 'z' in the matrix"),
        (["system", "tune", "smt", "--hosts", "{matrix}"], "smt: turning SMT off"),
        (["system", "show", "--hosts", "{matrix}", "--fsroot", "/tmp"], "--fsroot and --hosts"),
        (["system", "show", "--hosts", "{local}"], "has no `hosts:`"),
    ],
)
def test_bad_host_options_exit_2_before_any_host_is_reached(
    write_matrix: Callable[..., Path],
    tmp_path: Path,
    cli_hosts: list[LocalHosts],
    argv: list[str],
    message: str,
    null_matrix: Callable[..., Path],
) -> None:
    matrix = hosts_matrix(write_matrix, tmp_path)
    local = null_matrix()
    result = CliRunner().invoke(app, [a.format(matrix=matrix, local=local) for a in argv])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert cli_hosts == []
    assert tuning.pending_journals() == []


# --- the manifest and compare ---------------------------------------------------------------------------


def local_hosts_matrix(write_matrix: Callable[..., Path], tmp_path: Path) -> Path:
    return write_matrix(
        textwrap.dedent(
            f"""\
            version: 1
            name: settings-hosts
            fio: {{ioengine: null, rw: randread, bs: 4k, runtime: 1, time_based: 1}}
            hosts:
              - {{name: a, ssh: root@a, targets: [{{path: {tmp_path}/a.dat, size: 8M}}]}}
              - {{name: b, ssh: root@b, targets: [{{path: {tmp_path}/b.dat, size: 8M}}]}}
            matrix:
              iodepth: [1]
            """
        )
    )


@pytest.mark.fio
def test_a_run_on_hosts_keeps_each_hosts_settings_from_its_snapshot_and_compare_lists_them(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    from iobench.matrix.model import load_matrix
    from iobench.results.compare import compare
    from iobench.runner.sweep import run
    from iobench.store.rundir import RunDir

    hosts = LocalHosts(tmp_path / "homes")
    result = run(
        load_matrix(local_hosts_matrix(write_matrix, tmp_path)), out=tmp_path / "results", connector=hosts
    )
    assert result.counts == {"ok": 1}
    manifest = RunDir.open(result.run_dir).manifest()
    for host in manifest.hosts:
        assert [s["name"] for s in host["system"]] == [s.name for s in SETTINGS]
    here = {s.name: s.to_json() for s in show(SystemRoot())}
    saved = {s["name"]: s for s in manifest.hosts[0]["system"]}
    assert saved["thp"] == here["thp"] and saved["smt"] == here["smt"]  # the "hosts" are this machine
    for connection in hosts.made.values():
        # read from the preflight's snapshot through the one agent: no command runs there
        assert connection.calls == [] and [argv[0] for argv in connection.started] == ["python3"]
    from iobench.report.page import write_report

    html = write_report(result.run_dir).html.read_text()
    section = html[html.index("Host a") :]
    assert "transparent huge pages" in section[: section.index("Host b")]
    # B: the same run on a host whose THP differs
    other = tmp_path / "other"
    shutil.copytree(result.run_dir, other)
    data = json.loads((other / "manifest.json").read_text())
    thp = next(s for s in data["hosts"][1]["system"] if s["name"] == "thp")
    thp["value"] = "enabled always, defrag always"
    (other / "manifest.json").write_text(json.dumps(data))
    facts = {f["fact"]: f for f in compare(result.run_dir, other).attrs["machines"]}
    fact = facts["host b: system: transparent huge pages"]
    assert fact["differs"] and fact["b"] == "enabled always, defrag always"
    assert not facts["host a: system: transparent huge pages"]["differs"]
    assert "host a: kernel" in facts
