#!/bin/sh
# PID 1 of the lab guest: devices up, then `python -m lab.guest /out`, then power off.
# Everything the sweeps produce goes to /out (the host's folder); the rest of the
# guest's writes vanish with its tmpfs.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
# QEMU 7.2's TCG emulates AVX2, but numpy's x86-64-v3 kernels segfault under it
# (seen in pandas' groupby); the guest's speed means nothing anyway.
export NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR"
hostname iobench-lab
exec >/out/guest.log 2>&1
python=$(sed -n 's/.*labpython=\([^ ]*\).*/\1/p' /proc/cmdline)
disks=$(sed -n 's/.*labdisks=\([0-9]*\).*/\1/p' /proc/cmdline)
mkdir -p /dev/pts /run /mnt/guard
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
modprobe nvme
modprobe ext4
modprobe kyber-iosched
# NVMe namespaces appear asynchronously; wait for all of them (up to 30 s).
tries=0
while [ "$(ls /sys/block | grep -c '^nvme')" -lt "${disks:-1}" ] && [ "$tries" -lt 300 ]; do
    tries=$((tries + 1))
    sleep 0.1
done
# faulthandler: a crash in native code leaves its Python traceback in guest.log.
cd "$(dirname "$0")/.." && "$python" -X faulthandler -m lab.guest /out
echo $? >/out/guest.rc
sync
echo o >/proc/sysrq-trigger
sleep 30
