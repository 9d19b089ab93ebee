#!/bin/busybox sh
# /init of the lab initramfs. The guest's root is the host's / over virtio-9p,
# read-only, under a tmpfs overlay; /out is the host's results folder. Then the
# script named by labinit= on the kernel command line becomes PID 1.
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /host /rw /root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for module in $(cat /modules); do insmod "$module" || echo "lab init: insmod $module failed"; done
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        labinit=*) labinit=${arg#labinit=} ;;
        labmodules=*) labmodules=${arg#labmodules=} ;;
    esac
done
# The 9p devices show up while virtio probes; retry for up to 20 s.
tries=0
until mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /host 2>/dev/null; do
    tries=$((tries + 1))
    [ "$tries" -gt 400 ] && { echo "lab init: no hostroot 9p device"; poweroff -f; }
    sleep 0.05
done
mount -t tmpfs -o mode=755 rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work /root \
    || { echo "lab init: overlay failed"; poweroff -f; }
# The host has no modules for the guest kernel; they were unpacked into the lab cache.
rm -rf /root/usr/lib/modules
ln -s "$labmodules" /root/usr/lib/modules
mkdir -p /root/out
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=512000 out /root/out
for fs in proc sys dev; do mount --move "/$fs" "/root/$fs"; done
exec switch_root /root "$labinit"
