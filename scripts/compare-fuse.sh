#!/usr/bin/env bash
# FUSE export figures, mqblk against qemu-storage-daemon, in one run
# (issue 38's Speed section):
#
# Client: fio on the exported file, 4k random reads and writes,
# --direct=1, io_uring at depth 32, with 1 and with 4 jobs.
#
# Backings, the same for both servers:
#   null: mqblk `null,size=16G`     qsd `null-co,size=16 GiB,read-zeroes=on`
#   zram: a 1 GiB image file on an ext4 made on a fresh zram device, filled
#         first: mqblk `file:IMG,direct=1`
#         qsd `file,filename=IMG,cache.direct=on,aio=io_uring`
#         (skipped, and said so, where the kernel has no zram)
# mqblk serves with its defaults (`serve SPEC --fuse FILE`: one thread per
# hardware queue, at least 2, each with its own cloned /dev/fuse);
# qemu-storage-daemon with `--export type=fuse,...,writable=on`.
#
# Each case runs PAIRS alternating pairs (mqblk first in odd pairs, qsd
# first in even ones), each server started fresh. Printed per case: the
# median IOPS of each side with min and max, the ratio of the medians, and
# each server's median CPU per I/O (utime+stime of the server process over
# fio's run, divided by fio's I/Os) and their ratio. The issue asks for
# >= 1.5x qsd's IOPS at <= 0.6x its CPU per I/O.
#
# Usage: scripts/compare-fuse.sh [RUNTIME_SECONDS [PAIRS [BACKINGS]]]
#   (defaults: 5 seconds per run, 5 pairs, "null zram")
#   MQBLK=PATH serves with another mqblk binary.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-5}
pairs=${2:-5}
backings=${3:-null zram}
for t in qemu-storage-daemon fio mkfs.ext4 jq; do
  command -v "$t" >/dev/null || { echo "compare-fuse: $t is missing" >&2; exit 1; }
done
if [ -z "${MQBLK:-}" ]; then
  cargo build --release -q -p mqblk-cli --bin mqblk
fi
mqblk=${MQBLK:-${CARGO_TARGET_DIR:-target}/release/mqblk}
dir=$(mktemp -d)
export_file=$dir/export.img
server_pid=""
zram=""
zmnt=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  grep -q " $export_file " /proc/self/mountinfo && umount -l "$export_file" 2>/dev/null || true
  [ -n "$zmnt" ] && umount "$zmnt" 2>/dev/null || true
  if [ -n "$zram" ]; then
    echo 1 >"/sys/block/$zram/reset" 2>/dev/null || true
    echo "${zram#zram}" >/sys/class/zram-control/hot_remove 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# The export is up once the file has the device's size (bounded: 10 s).
wait_mounted() {
  for _ in $(seq 400); do
    if grep -q " $export_file " /proc/self/mountinfo && [ "$(stat -c %s "$export_file" 2>/dev/null || echo 0)" = "$1" ]; then
      return 0
    fi
    sleep 0.025
  done
  echo "compare-fuse: the export never came up on $export_file" >&2
  exit 1
}

# start SIDE BACKING: a fresh server exporting on $export_file; sets server_pid.
start() {
  local side=$1 what=$2 size
  : >"$export_file"
  if [ "$side" = mqblk ]; then
    local spec
    case $what in
      null) spec="null,size=16G"; size=17179869184 ;;
      zram) spec="file:$img,direct=1"; size=$img_size ;;
    esac
    "$mqblk" serve "$spec" --fuse "$export_file" 2>>"$dir/mqblk.log" &
  else
    local blockdev
    case $what in
      null) blockdev="driver=null-co,node-name=disk,size=17179869184,read-zeroes=on"; size=17179869184 ;;
      zram) blockdev="driver=file,node-name=disk,filename=$img,cache.direct=on,aio=io_uring"; size=$img_size ;;
    esac
    qemu-storage-daemon --blockdev "$blockdev" \
      --export "type=fuse,id=exp,node-name=disk,mountpoint=$export_file,writable=on" \
      2>>"$dir/qsd.log" &
  fi
  server_pid=$!
  wait_mounted "$size"
}

stop() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  grep -q " $export_file " /proc/self/mountinfo && umount -l "$export_file" 2>/dev/null || true
}

# CPU ticks (utime + stime) of a process.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# run SIDE BACKING RW JOBS -> "iops server_ns_per_io"
run() {
  start "$1" "$2"
  local t0 t1 out
  t0=$(ticks "$server_pid")
  out=$(fio --name=cmp --filename="$export_file" --ioengine=io_uring --direct=1 --rw="$3" \
    --bs=4k --iodepth=32 --numjobs="$4" --group_reporting --size=1G --time_based \
    --runtime="$runtime" --output-format=json 2>/dev/null)
  t1=$(ticks "$server_pid")
  stop
  local hz
  hz=$(getconf CLK_TCK)
  jq -r --argjson ticks $((t1 - t0)) --argjson hz "$hz" \
    '.jobs[0] | (.read.total_ios + .write.total_ios) as $ios
     | "\((.read.iops + .write.iops) | floor) \(if $ios > 0 then ($ticks / $hz * 1e9 / $ios | floor) else 0 end)"' <<<"$out"
}

# stats VALUES... -> "median min max"
stats() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { printf "%s %s %s\n", a[int((NR + 1) / 2)], a[1], a[NR] }'; }

echo "FUSE export: fio io_uring --direct=1, 4k, QD32, ${runtime}s per run, $pairs alternating pairs"
echo "$(nproc) CPUs; $(uname -r); $(qemu-storage-daemon --version | head -1)"
printf '%-16s %-5s %26s %26s %7s %12s %12s %6s\n' case jobs "mqblk IOPS med [min-max]" \
  "qsd IOPS med [min-max]" ratio "mqblk ns/IO" "qsd ns/IO" "cpu"
for what in $backings; do
  if [ "$what" = zram ]; then
    modprobe zram 2>/dev/null || true
    if [ ! -e /sys/class/zram-control/hot_add ]; then
      echo "zram: no zram in this kernel; the zram rows are left out"
      continue
    fi
    zram="zram$(cat /sys/class/zram-control/hot_add)"
    echo 2G >"/sys/block/$zram/disksize"
    mkfs.ext4 -q -F "/dev/$zram"
    zmnt=$dir/zmnt
    mkdir -p "$zmnt"
    mount "/dev/$zram" "$zmnt"
    img=$zmnt/image.raw
    img_size=$((1 << 30))
    fio --name=fill --filename="$img" --ioengine=io_uring --direct=1 --rw=write --bs=1m \
      --iodepth=8 --size="$img_size" --output-format=terse >/dev/null
  fi
  for jobs in 1 4; do
    for rw in randread randwrite; do
      m_iops=() q_iops=() m_cpu=() q_cpu=()
      for p in $(seq "$pairs"); do
        if [ $((p % 2)) -eq 1 ]; then order="mqblk qsd"; else order="qsd mqblk"; fi
        for side in $order; do
          read -r iops cpu < <(run "$side" "$what" "$rw" "$jobs")
          if [ "$side" = mqblk ]; then m_iops+=("$iops"); m_cpu+=("$cpu"); else q_iops+=("$iops"); q_cpu+=("$cpu"); fi
        done
      done
      read -r mm mlo mhi < <(stats "${m_iops[@]}")
      read -r qm qlo qhi < <(stats "${q_iops[@]}")
      read -r mc _ _ < <(stats "${m_cpu[@]}")
      read -r qc _ _ < <(stats "${q_cpu[@]}")
      printf '%-16s %-5s %26s %26s %7s %12s %12s %6s\n' "$what $rw" "$jobs" \
        "$mm [$mlo-$mhi]" "$qm [$qlo-$qhi]" \
        "$(awk -v a="$mm" -v b="$qm" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')" \
        "$mc" "$qc" \
        "$(awk -v a="$mc" -v b="$qc" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }')"
    done
  done
done
