"""Real sysfs snapshots (from hwloc's test suite) and hwloc's own reading of each.

They live in ``tests/data/sysfs/`` (its README.md gives their source and licence).
Each ``NAME.tar.bz2`` unpacks to a folder holding ``sys/``; beside it,
``NAME.console`` (lstopo text) or ``NAME.xml`` is what hwloc made of the same
machine. :func:`snapshot_root` extracts a tarball once per test session;
:func:`hwloc_reading` parses hwloc's output into the few facts we compare.

Tests use it through a session fixture of their own::

    @pytest.fixture(scope="session")
    def snapshots(tmp_path_factory):
        return SnapshotCache(tmp_path_factory)
"""

from __future__ import annotations

import os
import re
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Vendored in the repository (tests/data/sysfs/README.md says where they come from);
# $IOBENCH_SYSFS_SNAPSHOTS points the tests at another folder of the same files.
DEFAULT_DIR = Path(__file__).resolve().parent / "data" / "sysfs"

SNAPSHOTS = (
    "16amd64-8n2c",
    "16em64t-4s2c2t",
    "256ppc-8n8s4t",
    "2pa-pcidomain32bits",
    "32em64t-2n8c+dax+nvme+mic+dimms",
    "40intel64-2g2n4c+pcilocality",
)

# One extraction per session, shared by every module's fixture.
_EXTRACTED: dict[str, Path] = {}


def snapshot_dir() -> Path:
    """The folder holding the tarballs; a missing folder fails the test, never skips it."""
    override = os.environ.get("IOBENCH_SYSFS_SNAPSHOTS")
    folder = Path(override) if override else DEFAULT_DIR
    if not (folder / f"{SNAPSHOTS[0]}.tar.bz2").exists():
        pytest.fail(
            f"sysfs snapshots not found in {folder}"
            + (" ($IOBENCH_SYSFS_SNAPSHOTS)" if override else " (they are part of the repository)")
            + "; IOBENCH_SYSFS_SNAPSHOTS names a folder with the *.tar.bz2 files"
        )
    return folder


class SnapshotCache:
    """Extracts snapshots under the session's temporary directory, once each."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._factory = tmp_path_factory

    def root(self, name: str) -> Path:
        """Return the fsroot (the folder that contains ``sys/``) of snapshot ``name``."""
        if name not in _EXTRACTED:
            _EXTRACTED[name] = self._extract(name)
        return _EXTRACTED[name]

    def _extract(self, name: str) -> Path:
        dest = self._factory.mktemp(f"sysfs-{name}")
        with tarfile.open(snapshot_dir() / f"{name}.tar.bz2") as tar:
            # extractall's filter came with 3.11.4 (Debian 12's Python is 3.11.2); these archives are
            # the repository's own, extracted the same either way.
            if hasattr(tarfile, "tar_filter"):
                tar.extractall(dest, filter="tar")
            else:
                tar.extractall(dest)
        (folder,) = (p for p in dest.iterdir() if (p / "sys").is_dir())
        return folder


@dataclass
class HwlocReading:
    """What hwloc found: NUMA node → PUs, cores as PU sets, block device → single node."""

    nodes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    cores: set[tuple[int, ...]] = field(default_factory=set)
    device_nodes: dict[str, int | None] = field(default_factory=dict)


@dataclass
class _Obj:
    kind: str
    index: int | None
    parent: _Obj | None
    name: str | None = None
    numa_children: list[int] = field(default_factory=list)

    def ancestors(self) -> Iterator[_Obj]:
        obj = self.parent
        while obj is not None:
            yield obj
            obj = obj.parent


def hwloc_reading(name: str) -> HwlocReading:
    """Parse hwloc's reading of snapshot ``name`` from its .xml or .console file."""
    base = snapshot_dir() / name
    if base.with_suffix(base.suffix + ".xml").exists():
        objects = _xml_objects(Path(f"{base}.xml"))
    else:
        objects = _console_objects(Path(f"{base}.console"))
    return _reading(objects)


def _reading(objects: list[_Obj]) -> HwlocReading:
    reading = HwlocReading()
    core_members: dict[int, list[int]] = {}
    for obj in objects:
        if obj.kind == "NUMANode" and obj.index is not None:
            reading.nodes.setdefault(obj.index, ())
        elif obj.kind == "PU" and obj.index is not None:
            node = _single_node(obj)
            if node is not None:
                reading.nodes[node] = (*reading.nodes.get(node, ()), obj.index)
            core = next((a for a in obj.ancestors() if a.kind == "Core"), obj)
            core_members.setdefault(id(core), []).append(obj.index)
        elif obj.kind == "OSDev" and obj.name is not None:
            reading.device_nodes[obj.name] = _single_node(obj)
    reading.nodes = {node: tuple(sorted(cpus)) for node, cpus in reading.nodes.items()}
    reading.cores = {tuple(sorted(cpus)) for cpus in core_members.values()}
    return reading


def _single_node(obj: _Obj) -> int | None:
    """hwloc attaches NUMA nodes as memory children; the nearest ancestor with any decides."""
    for ancestor in obj.ancestors():
        if ancestor.kind == "NUMANode":
            return ancestor.index
        if ancestor.numa_children:
            children = ancestor.numa_children
            return children[0] if len(children) == 1 else None
    return None


def _xml_objects(path: Path) -> list[_Obj]:
    objects: list[_Obj] = []

    def walk(element: ET.Element, parent: _Obj | None) -> None:
        index = element.get("os_index")
        obj = _Obj(element.get("type", ""), int(index) if index else None, parent)
        obj.name = element.get("name") if obj.kind == "OSDev" else None
        if obj.kind == "NUMANode" and parent is not None and obj.index is not None:
            parent.numa_children.append(obj.index)
        objects.append(obj)
        for child in element.findall("object"):
            walk(child, obj)

    root = ET.parse(path).getroot()
    for top in root.findall("object"):
        walk(top, None)
    return objects


_CONSOLE_LINE = re.compile(
    r"(?P<indent> *)(?P<kind>[A-Za-z0-9]+)(?:\[[^\]]*\])?(?:\([^)]*\))?"
    r"(?: L#\d+)?(?: \((?P<attrs>.*?)\))?(?: \"(?P<name>[^\"]+)\")?$"
)
_P_INDEX = re.compile(r"(?:^|\s)P#(\d+)")


def _console_objects(path: Path) -> list[_Obj]:
    objects: list[_Obj] = []
    stack: list[tuple[int, _Obj]] = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith(("depth", " depth", "Special", "Topology")):
            continue
        match = _CONSOLE_LINE.match(line)
        if match is None:
            continue
        indent = len(match.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1] if stack else None
        p_index = _P_INDEX.search(match.group("attrs") or "")
        obj = _Obj(match.group("kind"), int(p_index.group(1)) if p_index else None, parent)
        obj.name = match.group("name") if obj.kind == "OSDev" else None
        if obj.kind == "NUMANode" and parent is not None and obj.index is not None:
            parent.numa_children.append(obj.index)
        objects.append(obj)
        stack.append((indent, obj))
    return objects


class FakeSysfs:
    """Builds a small sysfs tree under ``root`` for cases the snapshots lack.

    Paths and symlinks mirror the kernel's layout: devices live under
    ``sys/devices/...``, and ``sys/block``, ``sys/class/block`` and
    ``sys/dev/block`` link to them with relative symlinks.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sys = root / "sys"
        (self.sys / "devices" / "system" / "cpu").mkdir(parents=True, exist_ok=True)
        self._minor = 0

    def write(self, relpath: str, text: str) -> Path:
        """Write ``text`` to ``sys/<relpath>``, creating directories."""
        path = self.sys / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def cpu(
        self,
        cpu: int,
        package: int,
        core: int,
        siblings: str | None = None,
        siblings_mask: str | None = None,
        online: bool = True,
    ) -> None:
        """Add ``cpuN``; an offline CPU gets ``online`` = 0 and no topology directory."""
        base = f"devices/system/cpu/cpu{cpu}"
        if cpu != 0:
            self.write(f"{base}/online", "1\n" if online else "0\n")
        if not online:
            return
        self.write(f"{base}/topology/physical_package_id", f"{package}\n")
        self.write(f"{base}/topology/core_id", f"{core}\n")
        if siblings is not None:
            self.write(f"{base}/topology/thread_siblings_list", f"{siblings}\n")
        if siblings_mask is not None:
            self.write(f"{base}/topology/thread_siblings", f"{siblings_mask}\n")

    def node(
        self,
        node: int,
        cpulist: str | None = None,
        cpumap: str | None = None,
        distance: str | None = None,
    ) -> None:
        """Add ``nodeN`` with whichever of its files are given."""
        base = f"devices/system/node/node{node}"
        (self.sys / base).mkdir(parents=True, exist_ok=True)
        for name, text in (("cpulist", cpulist), ("cpumap", cpumap), ("distance", distance)):
            if text is not None:
                self.write(f"{base}/{name}", f"{text}\n")

    def pci(self, busid: str, numa_node: int, local_cpulist: str | None = None) -> str:
        """Add a PCI device; returns its path below ``sys/devices``."""
        domain = busid.rsplit(":", 2)[0]
        rel = f"pci{domain}:00/{busid}"
        self.write(f"devices/{rel}/numa_node", f"{numa_node}\n")
        if local_cpulist is not None:
            self.write(f"devices/{rel}/local_cpulist", f"{local_cpulist}\n")
        return rel

    def disk(
        self,
        name: str,
        parent: str = "virtual",
        scheduler: str = "none [mq-deadline] kyber",
        partitions: tuple[str, ...] = (),
        slaves: tuple[str, ...] = (),
        dm_name: str | None = None,
    ) -> Path:
        """Add a whole disk at ``sys/devices/<parent>/block/<name>`` (parent: see :meth:`pci`)."""
        base = f"devices/{parent}/block/{name}"
        dev = self._blockdev(base, name)
        self.write(f"{base}/queue/scheduler", f"{scheduler}\n")
        self.write(f"{base}/queue/read_ahead_kb", "128\n")
        self.write(f"{base}/queue/rotational", "0\n")
        self.write(f"{base}/size", "2097152\n")
        (dev / "holders").mkdir(exist_ok=True)
        (dev / "slaves").mkdir(exist_ok=True)
        self._link(self.sys / "block" / name, dev)
        for part in partitions:
            self._blockdev(f"{base}/{part}", part)
            self.write(f"{base}/{part}/partition", "1\n")
        for slave in slaves:
            target = (self.sys / "class" / "block" / slave).resolve()
            self._link(dev / "slaves" / slave, target)
            self._link(target / "holders" / name, dev)
        if dm_name is not None:
            self.write(f"{base}/dm/name", f"{dm_name}\n")
        return dev

    def _blockdev(self, base: str, name: str) -> Path:
        self._minor += 1
        self.write(f"{base}/dev", f"259:{self._minor}\n")
        dev = self.sys / base
        self._link(self.sys / "class" / "block" / name, dev)
        self._link(self.sys / "dev" / "block" / f"259:{self._minor}", dev)
        return dev

    @staticmethod
    def _link(link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(target, link.parent))
