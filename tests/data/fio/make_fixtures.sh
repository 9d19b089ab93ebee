#!/usr/bin/env bash
# Regenerate the fio fixtures in tests/data/fio/fio-<version>/ with the installed fio.
#
# Every job uses ioengine=null (no device, no data written) except the erring
# job, which points psync at a directory inside a private temporary directory.
# Runs are short (time_based, 100ms) so the whole script takes a few seconds.
# Usage: tests/data/fio/make_fixtures.sh [FIO]   (FIO defaults to `fio` on PATH)
set -euo pipefail

FIO=${1:-fio}
version=$("$FIO" --version)
here=$(cd "$(dirname "$0")" && pwd)
out="$here/$version"
mkdir -p "$out"
work=$(mktemp -d)
server_pids=()
cleanup() {
    for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

common=(--ioengine=null --size=64M --bs=4k --time_based --runtime=100ms)

run() {  # run NAME FIO-ARGS...: stdout (and stderr) of one fio run into $out/NAME
    local name=$1
    shift
    # fio exits 1 when a job errs; the output is still what we want to keep.
    "$FIO" "$@" >"$out/$name" 2>&1 || true
}

run read.json       "${common[@]}" --name=rread --rw=randread --output-format=json
run write.json      "${common[@]}" --name=swrite --rw=write --bs=64k --output-format=json
run randrw.json     "${common[@]}" --name=mix --rw=randrw --rwmixread=70 --output-format=json
run trim.json       "${common[@]}" --name=trim --rw=randtrim --output-format=json
run numjobs.json    "${common[@]}" --name=par --rw=randread --numjobs=3 --output-format=json
run group.json      "${common[@]}" --name=grp --rw=randread --numjobs=3 --group_reporting \
                    --output-format=json
run multi.json      "${common[@]}" --name=reader --rw=randread --name=writer --rw=randwrite \
                    --output-format=json
# Two reporting groups, one after the other: groupid 0 and 1.
run stonewall.json  "${common[@]}" --name=first --rw=randread --name=second --stonewall --rw=randread \
                    --bs=64k --output-format=json
run nopct.json      "${common[@]}" --name=nopct --rw=randread --clat_percentiles=0 \
                    --output-format=json
run gtod.json       "${common[@]}" --name=gtod --rw=randread --gtod_reduce=1 --output-format=json
mkdir -p "$work/adir"
# psync on a directory: fio reports err=21 (EISDIR) for that job and runs the other.
run error.json      --name=bad --ioengine=psync --filename="$work/adir" --size=1M --rw=read \
                    --name=good "${common[@]}" --rw=read --output-format=json
run jsonplus.json   "${common[@]}" --name=plus --rw=randrw --output-format=json+
# json+ of two jobs, with lat and slat histograms too (iodepth 4: the null engine then measures slat);
# and two jobs under group_reporting: fio's merged histogram beside the percentiles fio printed from it.
run jsonplus_jobs.json  "${common[@]}" --name=pj --rw=randread --iodepth=4 --numjobs=2 \
                    --lat_percentiles=1 --slat_percentiles=1 --output-format=json+
run jsonplus_group.json "${common[@]}" --name=pg --rw=randread --iodepth=4 --numjobs=2 \
                    --group_reporting --output-format=json+
run terse.txt       "${common[@]}" --name=tmix --rw=randrw --numjobs=2 --output-format=terse
run terse_v5.txt    "${common[@]}" --name=tv5 --rw=randrw --terse-version=5 --output-format=terse
run normal.txt      "${common[@]}" --name=nmix --rw=randrw --numjobs=2 --output-format=normal
run normal_group.txt "${common[@]}" --name=ngrp --rw=randread --numjobs=2 --group_reporting \
                    --name=nw --rw=write --bs=64k --output-format=normal
run json_normal.txt "${common[@]}" --name=jn --rw=randrw --output-format=json,normal
run json_terse.txt  "${common[@]}" --name=jt --rw=randrw --output-format=json,terse

# Client/server: two fio servers on loopback, one client driving both.
port1=$((20000 + RANDOM % 20000))
port2=$((port1 + 1))
"$FIO" --server=ip:127.0.0.1,$port1 >/dev/null 2>&1 &
server_pids+=($!)
"$FIO" --server=ip:127.0.0.1,$port2 >/dev/null 2>&1 &
server_pids+=($!)
sleep 1
cat >"$work/client.fio" <<JOB
[global]
ioengine=null
size=64M
bs=4k
time_based
runtime=100ms
[cs]
rw=randread
numjobs=2
JOB
run client.json --output-format=json --client=ip:127.0.0.1,$port1 "$work/client.fio" \
                --client=ip:127.0.0.1,$port2 "$work/client.fio"

# The same run seen per job and as fio's own sum ("All clients": sum_thread_stats over every job):
# two jobs reading 1 MiB and two reading 3 MiB at 500 IOPS each, so they end 0.5 s and 1.5 s in.
for size in 1M 3M; do
    cat >"$work/rate$size.fio" <<JOB
[global]
ioengine=null
bs=4k
rw=randread
rate_iops=500
numjobs=2
[rate$size]
size=$size
JOB
done
run client_plus.json --output-format=json+ --client=ip:127.0.0.1,$port1 "$work/rate1M.fio" \
                --client=ip:127.0.0.1,$port2 "$work/rate3M.fio"
