"""The lab machine on the host side: packages, a Debian kernel, an initramfs, and QEMU's argv.

Large state lives in a cache folder (``$IOBENCH_LAB_CACHE``, default
``/var/tmp/iobench-lab``): the unpacked kernel (~170 MB) and the initramfs.
Disk images are sparse files in the run's temporary folder. Nothing is
installed into ``/boot`` and the kernel package is never installed, only unpacked.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("IOBENCH_LAB_CACHE", "/var/tmp/iobench-lab"))
COMMANDS = {"qemu-system-x86_64": "qemu-system-x86", "busybox": "busybox-static", "depmod": "kmod"}
BOOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
# Module trees a storage/NUMA guest never loads: they are most of the kernel package's size.
PRUNED = (
    "sound",
    "drivers/gpu",
    "drivers/media",
    "drivers/infiniband",
    "drivers/net/wireless",
    "drivers/net/ethernet",
    "drivers/staging",
    "drivers/usb",
    "drivers/iio",
    "drivers/hid",
    "drivers/bluetooth",
    "drivers/input",
    "net/wireless",
    "net/mac80211",
    "net/bluetooth",
)
DISK_SIZE = 1 << 30
# Every NVMe by serial (the guest finds its disks by serial, not by name):
# node0/node1 behind a root port of their node's PCIe expander bridge, nonode on
# the root bus (numa_node -1), slow behind a root port given a lower link
# maximum than QEMU's default, shared-a/b behind one switch under one root port
# of node 1's expander bridge.
DISKS = ("lab-node0", "lab-node1", "lab-nonode", "lab-slow", "lab-shared-a", "lab-shared-b")
# x-speed/x-width of the slow root port (QEMU's default is 16 GT/s x32).
SLOW_PORT_LINK = ("5", "2")


class LabUnavailable(Exception):
    """This machine cannot run the lab (no qemu and no root to install it, no apt, no network).

    Only what the machine lacks is this; anything that goes wrong once what the
    lab needs is there is a :class:`LabError`.
    """


class LabError(Exception):
    """The lab harness failed (a set-up step, QEMU or the guest): a bug to fix, never "cannot run here".

    The message ends with what the failing step printed, or the guest's logs.
    """


@dataclass(frozen=True)
class Kernel:
    version: str
    root: Path

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.version}"

    @property
    def modules(self) -> Path:
        return self.root / "lib" / "modules"


def _run(
    argv: list[str], *, failure: type[Exception] = LabError, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """Run a set-up step; its failure raises ``failure``: :class:`LabError` unless the step needs the network."""
    try:
        return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload,no-any-return]
    except FileNotFoundError as exc:
        raise failure(f"{argv[0]} not found") from exc
    except subprocess.CalledProcessError as exc:
        raise failure(
            f"{' '.join(argv[:3])} failed (exit {exc.returncode}):\n{(exc.stderr or exc.stdout or '').strip()[-2000:]}"
        ) from exc


def _missing_commands() -> list[str]:
    return sorted({package for command, package in COMMANDS.items() if shutil.which(command) is None})


def ensure_packages() -> None:
    """Install qemu, busybox and kmod from apt when missing (needs root)."""
    missing = _missing_commands()
    if not missing:
        return
    if os.geteuid() != 0:
        raise LabUnavailable(f"needs {', '.join(missing)}: run as root, or install them first")
    if shutil.which("apt-get") is None:
        raise LabUnavailable(f"needs {', '.join(missing)} and there is no apt-get to install them")
    _run(["apt-get", "update", "-qq"], failure=LabUnavailable)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        failure=LabUnavailable,
        env=env,
    )
    still = _missing_commands()
    if still:
        raise LabError(f"installed {', '.join(missing)} but still missing commands of {', '.join(still)}")


def kernel_version() -> str:
    """The ABI that Debian's ``linux-image-amd64`` points to (``$IOBENCH_LAB_KERNEL`` pins one)."""
    pinned = os.environ.get("IOBENCH_LAB_KERNEL")
    if pinned:
        return pinned
    for attempt in range(2):
        depends = _run(["apt-cache", "depends", "linux-image-amd64"], failure=LabUnavailable).stdout
        match = re.search(r"Depends: linux-image-(\S+)", depends)
        if match:
            return match.group(1)
        if attempt == 0:
            _run(["apt-get", "update", "-qq"], failure=LabUnavailable)
    raise LabUnavailable("apt knows no linux-image-amd64 (no Debian package lists?)")


def fetch_kernel(cache: Path = CACHE) -> Kernel:
    """Download and unpack the guest kernel into the cache (once per version)."""
    kernel = Kernel(kernel_version(), cache / "kernel")
    if kernel.vmlinuz.is_file() and (kernel.modules / kernel.version / "modules.dep").is_file():
        return kernel
    shutil.rmtree(kernel.root, ignore_errors=True)
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    downloads.chmod(0o777)  # apt-get download drops privileges to _apt
    _run(["apt-get", "download", f"linux-image-{kernel.version}"], failure=LabUnavailable, cwd=downloads)
    [deb] = downloads.glob(f"linux-image-{kernel.version}_*.deb")
    _run(["dpkg-deb", "-x", str(deb), str(kernel.root)])
    deb.unlink()
    tree = kernel.modules / kernel.version / "kernel"
    for sub in PRUNED:
        shutil.rmtree(tree / sub, ignore_errors=True)
    _run(["depmod", "-b", str(kernel.root), kernel.version])
    return kernel


def build_initramfs(kernel: Kernel, out: Path) -> Path:
    """busybox, the modules that mount the host's root over 9p, and ``init.sh`` as ``/init``."""
    staging = out / "initramfs"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    (staging / "mod").mkdir()
    shutil.copy2(shutil.which("busybox") or "/bin/busybox", staging / "bin" / "busybox")
    depends = _run(
        ["modprobe", "-d", str(kernel.root), "-S", kernel.version, "--show-depends", "-a", *BOOT_MODULES]
    ).stdout
    modules: list[str] = []
    for line in depends.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "insmod" and fields[1] not in modules:
            modules.append(fields[1])
    for module in modules:
        shutil.copy2(module, staging / "mod")
    (staging / "modules").write_text("".join(f"/mod/{Path(m).name}\n" for m in modules))
    shutil.copy2(HERE / "init.sh", staging / "init")
    (staging / "init").chmod(0o755)
    names = sorted(str(p.relative_to(staging)) for p in staging.rglob("*"))
    archive = subprocess.run(
        ["busybox", "cpio", "-o", "-H", "newc", "-R", "0:0"],
        input="\n".join(names).encode(),
        cwd=staging,
        capture_output=True,
        check=True,
    ).stdout
    path = out / "initramfs.cpio.gz"
    path.write_bytes(gzip.compress(archive, compresslevel=1))
    shutil.rmtree(staging)
    return path


def accelerator() -> str:
    """KVM only with hardware virtualisation: a /dev/kvm without vmx/svm (PVM nesting) crawls."""
    forced = os.environ.get("IOBENCH_LAB_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    with open("/proc/cpuinfo") as cpuinfo:
        flags = cpuinfo.read()
    has_vt = re.search(r"\b(vmx|svm)\b", flags) is not None
    return "kvm" if has_vt and os.access("/dev/kvm", os.W_OK) else "tcg"


def make_disks(folder: Path) -> list[Path]:
    """Sparse 1 GiB images, one per NVMe controller."""
    images = []
    for serial in DISKS:
        image = folder / f"{serial}.img"
        with open(image, "wb") as handle:
            handle.truncate(DISK_SIZE)
        images.append(image)
    return images


def qemu_argv(
    kernel: Kernel, initramfs: Path, disks: list[Path], out: Path, *, python: str, accel: str
) -> list[str]:
    """2 sockets × 2 cores × 2 threads, a NUMA node per socket, six NVMe placed as :data:`DISKS` says."""
    if accel == "tcg":
        cpu = "max,vendor=GenuineIntel"  # TCG has no AMD topoext: an AMD-flavoured guest would see no SMT
    else:
        cpu = "host,-arch-capabilities" + (
            ",+topoext" if "AuthenticAMD" in Path("/proc/cpuinfo").read_text() else ""
        )
    argv = [
        "qemu-system-x86_64",
        "-name", "iobench-lab",
        "-machine", f"q35,accel={accel}",
        "-cpu", cpu,
        "-smp", "8,sockets=2,cores=2,threads=2",
        "-m", "2048M",
        "-object", "memory-backend-ram,id=ram0,size=1G",
        "-object", "memory-backend-ram,id=ram1,size=1G",
        "-numa", "node,nodeid=0,memdev=ram0",
        "-numa", "node,nodeid=1,memdev=ram1",
        "-numa", "cpu,node-id=0,socket-id=0",
        "-numa", "cpu,node-id=1,socket-id=1",
        "-numa", "dist,src=0,dst=1,val=21",
    ]  # fmt: skip
    for node in (0, 1):
        # An expander bridge is a host bridge with its own _PXM; every endpoint needs an explicit bus.
        argv += ["-device", f"pxb-pcie,id=pxb{node},bus_nr={64 * (node + 1)},numa_node={node},bus=pcie.0"]
        argv += ["-device", f"pcie-root-port,id=port{node},bus=pxb{node},chassis={10 + node},slot=0"]
    speed, width = SLOW_PORT_LINK
    argv += [
        "-device", f"pcie-root-port,id=slowport,bus=pcie.0,chassis=30,slot=0,x-speed={speed},x-width={width}",
        "-device", "pcie-root-port,id=swport,bus=pxb1,chassis=31,slot=0",
        "-device", "x3130-upstream,id=swup,bus=swport",
        "-device", "xio3130-downstream,id=swdown0,bus=swup,chassis=32,slot=0",
        "-device", "xio3130-downstream,id=swdown1,bus=swup,chassis=33,slot=0",
    ]  # fmt: skip
    # The root bus has no proximity domain: the nonode and slow disks get numa_node -1.
    buses = ("port0", "port1", "pcie.0", "slowport", "swdown0", "swdown1")
    for index, (serial, bus, image) in enumerate(zip(DISKS, buses, disks, strict=True)):
        argv += ["-drive", f"file={image},if=none,id=disk{index},format=raw,cache=none,aio=threads"]
        argv += ["-device", f"nvme,drive=disk{index},serial={serial},bus={bus}"]
    argv += [
        "-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,bus=pcie.0",
        "-fsdev", f"local,id=out,path={out},security_model=none",
        "-device", "virtio-9p-pci,fsdev=out,mount_tag=out,bus=pcie.0",
        "-kernel", str(kernel.vmlinuz),
        "-initrd", str(initramfs),
        "-append", (
            f"console=ttyS0 quiet panic=-1 labinit={HERE / 'guest.sh'} labmodules={kernel.modules}"
            f" labpython={python} labdisks={len(DISKS)}"
        ),
        "-display", "none",
        "-serial", f"file:{out / 'console.log'}",
        "-monitor", "none",
        "-no-reboot",
    ]  # fmt: skip
    return argv


def boot(argv: list[str], *, timeout: float, log: Path | None = None) -> int:
    """Run the guest until it powers off; return QEMU's exit code (124 after ``timeout`` seconds).

    QEMU's own output (a bad option, a device it refused) goes to ``log``.
    """
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        returncode, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        returncode = 124
        output = (exc.stdout or b"") + (exc.stderr or b"") + f"\nkilled after {timeout:.0f} s\n".encode()
    if log is not None:
        log.write_bytes(output)
    return returncode
