"""The agent: its protocol, its readers on fake trees, and itself over pipes as hosts start it."""

from __future__ import annotations

import ast
import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sysfs_snapshots import FakeSysfs, SnapshotCache

from iobench.agent import MODULES, command, payload, probe
from iobench.agent.protocol import (
    HELLO,
    VERSION,
    AgentError,
    Channel,
    ProtocolError,
    Reader,
    encode,
    hello_problem,
)
from iobench.agent.serve import Agent
from iobench.system.remote import write_snapshot_tree
from iobench.system.topology import discover_topology

AGENT = Path(__file__).resolve().parent.parent / "iobench" / "agent"


@pytest.fixture(scope="session")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> SnapshotCache:
    return SnapshotCache(tmp_path_factory)


# --- the protocol ----------------------------------------------------------------------


def _pipe_with(data: bytes) -> int:
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    return read


def test_messages_round_trip_and_stop_at_their_length() -> None:
    fd = _pipe_with(encode({"a": "é\n", "n": [1, None]}) + encode({"b": 2}))
    reader = Reader(fd)
    assert reader.read(1) == {"a": "é\n", "n": [1, None]}
    assert reader.read(1) == {"b": 2}
    with pytest.raises(ProtocolError, match="ended"):
        reader.read(1)
    os.close(fd)


def test_an_oversized_message_is_refused_before_its_body_is_read() -> None:
    fd = _pipe_with(struct.pack(">I", 1 << 31))
    with pytest.raises(ProtocolError, match="over the limit"):
        Reader(fd, limit=1 << 20).read(1)
    os.close(fd)


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b"\xff\xfe"])
def test_garbage_is_a_protocol_error(body: bytes) -> None:
    fd = _pipe_with(struct.pack(">I", len(body)) + body)
    with pytest.raises(ProtocolError):
        Reader(fd).read(1)
    os.close(fd)


def test_a_silent_peer_fails_the_read_at_its_deadline() -> None:
    read, write = os.pipe()
    with pytest.raises(ProtocolError, match="no answer"):
        Reader(read).read(0.01)
    os.close(read)
    os.close(write)


def test_another_protocol_version_is_refused_naming_both() -> None:
    assert hello_problem({"hello": HELLO, "version": VERSION}) is None
    assert "version 99" in str(hello_problem({"hello": HELLO, "version": 99}))
    assert "iobench agent" in str(hello_problem({"hello": "sshd"}))


# --- readers on fake trees ---------------------------------------------------------------


def _write(root: Path, relpath: str, text: str) -> None:
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _stat_line(pid: int, name: str, state: str, threads: int, utime: int, processor: int) -> str:
    # Fields after ")": state(0) ppid pgrp session tty tpgid flags(6) ... utime(11) stime(12) ... threads(17) ... processor(36)
    fields = ["0"] * 50
    fields[0], fields[6], fields[11], fields[12], fields[17], fields[36] = (
        state,
        "64",
        str(utime),
        "3",
        str(threads),
        str(processor),
    )
    fields[49] = "256"
    return f"{pid} ({name}) " + " ".join(fields) + "\n"


def _process(
    root: Path,
    pid: int,
    ppid: int,
    name: str,
    *,
    state: str = "S",
    cpus: str = "0-3",
    policy: str = "default",
) -> None:
    _write(
        root,
        f"proc/{pid}/status",
        f"Name:\t{name}\nState:\t{state} (x)\nPid:\t{pid}\nPPid:\t{ppid}\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t0-1\n",
    )
    _write(root, f"proc/{pid}/stat", _stat_line(pid, name, state, 1, pid * 10, 1))
    _write(root, f"proc/{pid}/numa_maps", f"7f00 {policy} anon=1\n7f01 {policy} file=/x\n")
    _write(root, f"proc/{pid}/task/{pid}/children", "")
    _write(root, f"proc/{pid}/comm", f"{name}\n")


def _children(root: Path, pid: int, kids: list[int]) -> None:
    _write(root, f"proc/{pid}/task/{pid}/children", " ".join(map(str, kids)) + " ")


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    sysfs = FakeSysfs(root)
    sysfs.cpu(0, 0, 0, "0", "1")
    sysfs.cpu(1, 0, 1, "1", "2")
    sysfs.node(0, "0-1", "3", "10")
    sysfs.disk("sda", parent=sysfs.pci("0000:00:1f.2", 0, "0-1"), scheduler="none [mq-deadline]")
    _write(root, "proc/stat", "cpu  1 2 3 4\ncpu0 1 1 1 1 0 0 0 0\ncpu1 2 2 2 2 0 0 0 0\nintr 99\nctxt 5\n")
    _write(
        root,
        "proc/diskstats",
        "   8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17\n   8 16 sdb 1 1 1 1 1 1 1 1 1 1 1\n",
    )
    _write(
        root,
        "proc/interrupts",
        "           CPU0       CPU1\n 24:  5  6  PCI-MSI  nvme0q1\n 25:  7  8  PCI-MSI  other\nNMI:  0  0  Non-maskable\n",
    )
    _write(
        root, "proc/meminfo", "MemTotal: 100 kB\nCached: 10 kB\nDirty: 2 kB\nWriteback: 0 kB\nSlab: 5 kB\n"
    )
    _write(root, "proc/sys/kernel/hostname", "fakehost\n")
    _write(root, "proc/sys/kernel/random/boot_id", "abc-boot\n")
    _write(root, "proc/self/mountinfo", "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n")
    # A fio server (10) -> backend (11) -> its fork (12) -> two jobs (13, 14; 14 a zombie).
    for pid, ppid, name in (
        (10, 1, "fio"),
        (11, 10, "fio"),
        (12, 11, "fio"),
        (13, 12, "fio"),
        (14, 12, "fio"),
    ):
        _process(
            root,
            pid,
            ppid,
            name,
            state="Z" if pid == 14 else "S",
            cpus="1" if pid == 13 else "0-1",
            policy="bind:0" if pid == 13 else "default",
        )
    _children(root, 10, [11])
    _children(root, 11, [12])
    _children(root, 12, [13, 14])
    # A process with two threads: its threads are read one by one.
    _process(root, 20, 1, "multi")
    _write(root, "proc/20/stat", _stat_line(20, "multi", "S", 2, 7, 0))
    _write(root, "proc/20/task/20/stat", _stat_line(20, "multi", "S", 2, 7, 0))
    _write(root, "proc/20/task/21/stat", _stat_line(21, "worker (x)", "R", 2, 9, 1))
    return root


def test_a_sample_keeps_exactly_what_telemetry_keeps(fake: Path) -> None:
    found = probe.sample(str(fake), devices=["sda"], irqs=["24"], threads=True)
    assert found["stat"] == "cpu0 1 1 1 1 0 0 0 0\ncpu1 2 2 2 2 0 0 0 0"
    assert found["diskstats"].split()[2] == "sda" and "sdb" not in found["diskstats"]
    assert found["interrupts"].splitlines()[0].split() == ["CPU0", "CPU1"]
    assert [line.split(":")[0].strip() for line in found["interrupts"].splitlines()[1:]] == ["24"]
    assert sorted(line.split(":")[0] for line in found["meminfo"].splitlines()) == sorted(probe.MEMINFO_KEPT)
    rows = {row[1]: row for row in found["tasks"]}
    assert rows[21] == [20, 21, 64, 9, 3, 1, "worker (x)"]
    assert rows[13][:2] == [13, 13] and rows[20][:2] == [20, 20]  # a two-thread process: each of its threads
    assert probe.sample(str(fake))["tasks"] is None and probe.sample(str(fake))["diskstats"] is None


def test_the_local_sampler_keeps_the_agents_meminfo_lines() -> None:
    from iobench.system import procfs, sampler

    assert sampler.MEMINFO_KEPT is probe.MEMINFO_KEPT
    assert procfs.TASK_STAT_FIELDS is probe.TASK_STAT_FIELDS


def test_looks_find_the_job_processes_below_the_server_with_their_policy(fake: Path) -> None:
    seen = {row["pid"]: row for row in probe.looks(str(fake), 10, 3, policy_of=[13])}
    assert sorted(seen) == [13, 14]
    assert seen[13]["cpus"] == "1" and seen[13]["policy"] == ["bind:0"] and seen[13]["ppid"] == 12
    assert seen[14]["state"] == "Z" and "policy" not in seen[14]
    assert probe.exit_codes(str(fake), [13, 14, 99]) == {"14": 256}
    assert probe.descendants(str(fake), 11) == [11, 12, 13, 14]


def test_the_snapshot_holds_what_the_topology_reads(fake: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.dat"
    target.write_bytes(b"\0" * 512)
    found = probe.snapshot(str(fake), [str(target), "/nonexistent/dir/x"])
    assert found["files"]["/proc/sys/kernel/hostname"] == "fakehost\n"
    assert found["files"]["/proc/13/comm"] == "fio"  # one line of each process's name
    assert any(path.endswith("/block/sda") for path in found["dirs"])
    assert found["links"]["/sys/block/sda"].startswith("../devices/")
    assert found["targets"][str(target)]["stat"][5] == 512
    assert found["targets"]["/nonexistent/dir/x"]["existing"] == "/"
    # Every path is the host's own, never the root's.
    assert not any(str(fake) in path for path in [*found["files"], *found["links"], *found["dirs"]])


def _records(found: dict) -> list[tuple[str, str, list[str]]]:
    return (
        [("D", path, []) for path in found["dirs"]]
        + [("F", path, [*text.split("\n"), ""]) for path, text in found["files"].items()]
        + [("L", path, [target]) for path, target in found["links"].items()]
    )


@pytest.mark.parametrize(
    "name", ["16amd64-8n2c", "32em64t-2n8c+dax+nvme+mic+dimms", "40intel64-2g2n4c+pcilocality"]
)
def test_a_snapshot_copied_elsewhere_reads_as_the_tree_itself(
    name: str, snapshots: SnapshotCache, tmp_path: Path
) -> None:
    original = snapshots.root(name)
    copy = tmp_path / "copy"
    write_snapshot_tree(copy, _records(probe.snapshot(str(original), [])))
    here, there = discover_topology(original), discover_topology(copy)
    assert there.nodes == here.nodes and there.cores == here.cores and there.devices == here.devices


def test_an_edge_reads_targets_settings_and_a_sample(fake: Path, tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("x")
    found = probe.edge(
        str(fake), [str(target), str(tmp_path / "gone")], ["sda", "nope", "../x"], {"devices": ["sda"]}
    )
    info = os.stat(target)
    assert found["targets"][str(target)] == {
        "exists": True,
        "block": False,
        "identity": [info.st_dev, info.st_ino],
    }
    assert found["targets"][str(tmp_path / "gone")] == {"exists": False}
    assert found["settings"] == {"sda": {"scheduler": "none [mq-deadline]", "readahead_kb": "128"}}
    assert found["sample"]["diskstats"].split()[2] == "sda"


def test_a_files_read_is_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 10000)
    assert probe.read_bytes(str(big), 100) == b"x" * 100


def test_settings_are_written_with_one_write_and_read_back(fake: Path) -> None:
    agent = Agent(str(fake))
    path = "/sys/block/sda/queue/read_ahead_kb"
    assert agent.op_write(path, "256") == {}
    assert agent.op_read(path)["text"].strip() == "256"
    assert agent.op_read("/sys/block/sda/queue/none")["errno"] == 2
    assert agent.op_realpath("/sys/block/sda").startswith("/sys/devices/")
    assert "queue" in agent.op_list_dir("/sys/block/sda")


# --- the agent itself, started as a host starts it ------------------------------------------


def test_the_agent_imports_nothing_of_iobench_and_parses_as_python_3_9() -> None:
    for name in (*MODULES, "__init__"):
        tree = ast.parse((AGENT / f"{name}.py").read_text(), feature_version=(3, 9))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.startswith("iobench.agent") or not node.module.startswith("iobench"), name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("iobench") for a in node.names), name


class Started:
    def __init__(self, argv: list[str], data: bytes = b"", env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if data:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        self.channel = Channel(self.proc.stdout.fileno(), self.proc.stdin.fileno())

    def end(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=30)
        self.close()
        return code

    def close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def started() -> Iterator[list[Started]]:
    made: list[Started] = []
    yield made
    for one in made:
        if one.proc.poll() is None:
            one.proc.kill()
            one.proc.wait()
        one.close()


def _bootstrapped(made: list[Started], env: dict[str, str] | None = None, root: str | None = None) -> Started:
    data = payload()
    argv = command(len(data), root)
    argv[0] = sys.executable  # the bootstrap as a host runs it, with this interpreter
    made.append(Started(argv, data, env))
    return made[-1]


def test_the_bootstrap_runs_the_agent_from_its_input_and_it_answers(
    started: list[Started], fake: Path
) -> None:
    one = _bootstrapped(started, root=str(fake))
    hello = one.channel.greet(30)
    assert hello["pid"] == one.proc.pid and hello["boot_id"] == "abc-boot"
    sample = one.channel.call("sample", {"devices": ["sda"], "threads": False}, 30)
    assert sample["diskstats"].split()[2] == "sda"
    with pytest.raises(AgentError, match="no such request"):
        one.channel.call("format_disk", {}, 30)
    with pytest.raises(AgentError, match="bad request"):
        one.channel.call("looks", {"nonsense": 1}, 30)
    assert one.end() == 0


def test_the_agent_runs_as_a_module_here_too(started: list[Started]) -> None:
    env = dict(os.environ, PYTHONPATH=str(AGENT.parent.parent))
    started.append(Started([sys.executable, "-m", "iobench.agent"], env=env))
    assert started[-1].channel.greet(30)["version"] == VERSION
    assert started[-1].channel.call("exists", {"path": "/proc/self"}, 30) is True
    assert started[-1].end() == 0


def test_locks_are_held_by_the_agent_until_it_ends(started: list[Started], tmp_path: Path) -> None:
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    first, second = _bootstrapped(started, env), _bootstrapped(started, env)
    first.channel.greet(30)
    second.channel.greet(30)
    assert first.channel.call("lock", {"disks": ["sdz", "sdy"]}, 30)["locked"] == ["sdy", "sdz"]
    busy = second.channel.call("lock", {"disks": ["sdx", "sdz"]}, 30)["busy"]
    assert list(busy) == ["sdz"] and busy["sdz"].split()[0] == str(first.proc.pid)
    assert first.end() == 0
    assert second.channel.call("lock", {"disks": ["sdx", "sdz"]}, 30)["locked"] == ["sdx", "sdz"]
    with pytest.raises(AgentError, match="not a device name"):
        second.channel.call("lock", {"disks": ["../etc"]}, 30)


def test_a_bootstrap_given_too_little_source_ends_without_serving(started: list[Started]) -> None:
    data = payload()
    argv = command(len(data) + 10)
    argv[0] = sys.executable
    one = Started(argv, data)
    started.append(one)
    assert one.end() == 3
    assert json.loads(data)[0] == ["iobench", ""]


def test_programs_are_run_from_argv_with_bounded_output(started: list[Started]) -> None:
    one = _bootstrapped(started)
    one.channel.greet(30)
    done = one.channel.call("run", {"argv": [sys.executable, "-c", "print('x' * 200000)"]}, 30)
    assert done["returncode"] == 0 and len(done["stdout"]) == 64 << 10
    assert one.channel.call("run", {"argv": ["/nonexistent/tool"]}, 30)["returncode"] == 127
    assert one.end() == 0
