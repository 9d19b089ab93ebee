#!/bin/sh
# PID 1 of the lab guest: devices up, then `python -m lab.guest /out`, then power off.
# Everything the sweeps produce goes to /out (the host's folder); the rest of the
# guest's writes vanish with its tmpfs.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
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
cd "$(dirname "$0")/.." && "$python" -m lab.guest /out
echo $? >/out/guest.rc
sync
echo o >/proc/sysrq-trigger
sleep 30
