#!/usr/bin/env bash
# vhost-user-blk figures, mqblk against qemu-storage-daemon, in one run:
#
# Client: libblkio's virtio-blk-vhost-user driver (the `blkio` crate, in
# crates/mqblk-cli/examples/vhost_load.rs): 4k random reads and writes at
# depth 32 per queue, one thread per queue, with 1 and with 2 queues.
#
# Backings, the same for both servers:
#   null: mqblk `null,size=16G`          qsd `null-co,size=16 GiB,read-zeroes=on`
#   zram: mqblk `file:/dev/zramN,direct=1`
#         qsd `host_device,filename=/dev/zramN,cache.direct=on,aio=io_uring`
#   (a 1 GiB zram device made here, filled first; a loop device over tmpfs
#   where the kernel has no zram)
# qemu-storage-daemon serves its export from one iothread, as its
# documentation sets a vhost-user-blk export up; mqblk serves each queue
# from a thread of its own (--num-queues). Two pairings, as each side
# waits for work:
#   poll:  qsd's default: its iothread polls for up to 32 us before it
#          sleeps (poll-max-ns=32768, adaptive); mqblk --poll-us 32.
#   event: both sleep at once: qsd's iothread with poll-max-ns=0; mqblk's
#          default (no --poll-us).
#
# Each case runs PAIRS alternating pairs (mqblk first in odd pairs, qsd
# first in even ones), each server started fresh. Printed per case: the
# median IOPS of each side with min and max, the ratio of the medians, and
# each backend's median CPU per I/O (utime+stime of the server process
# over the client's measuring window) and their ratio.
#
# Usage: scripts/compare-vhost.sh [RUNTIME_SECONDS [PAIRS [BACKINGS [MODES]]]]
#   (defaults: 5 seconds per run, 5 pairs, "null zram", "poll event")
#   PIN=same runs both servers and the client on CPU 0; PIN=split runs
#   the servers on CPU 0 and the client on CPU 1 (taskset). Unset, the
#   scheduler places them: with one queue on an idle 2-CPU machine it
#   puts client and server on different CPUs, and each wake-up then
#   finds a halted vCPU.
#   MQBLK=PATH serves with another mqblk binary (an earlier build kept
#   aside, to put before and after in runs close together).
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-5}
pairs=${2:-5}
backings=${3:-null zram}
modes=${4:-poll event}
case ${PIN:-} in
  "") server_cpu="" client_cpu="" ;;
  same) server_cpu="taskset -c 0" client_cpu="taskset -c 0" ;;
  split) server_cpu="taskset -c 0" client_cpu="taskset -c 1" ;;
  *) echo "compare-vhost: PIN is same or split" >&2; exit 1 ;;
esac
for t in qemu-storage-daemon fio losetup; do
  command -v "$t" >/dev/null || { echo "compare-vhost: $t is missing" >&2; exit 1; }
done
cargo build --release -q -p mqblk-cli --bin mqblk --example vhost_load
target=${CARGO_TARGET_DIR:-target}/release
mqblk=${MQBLK:-$target/mqblk}
load=$target/examples/vhost_load
dir=$(mktemp -d)
server_pid=""
zram=""
backing=""
loopdev=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  [ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null || true
  [ -n "$backing" ] && rm -f "$backing"
  if [ -n "$zram" ]; then
    echo 1 >"/sys/block/$zram/reset" 2>/dev/null || true
    echo "${zram#zram}" >/sys/class/zram-control/hot_remove 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

wait_sock() { for _ in $(seq 400); do [ -S "$1" ] && return 0; sleep 0.025; done; echo "no socket $1" >&2; exit 1; }

# start SIDE BACKING QUEUES MODE: a fresh server on $dir/vhost.sock; sets server_pid.
start() {
  local side=$1 what=$2 queues=$3 mode=$4 sock=$dir/vhost.sock
  rm -f "$sock"
  if [ "$side" = mqblk ]; then
    local spec
    case $what in
      null) spec="null,size=16G" ;;
      zram) spec="file:$dev,direct=1" ;;
    esac
    local poll=0
    [ "$mode" = poll ] && poll=32
    $server_cpu "$mqblk" serve "$spec" --vhost-user-blk "$sock" --num-queues "$queues" --poll-us "$poll" \
      2>>"$dir/mqblk.log" &
  else
    local blockdev
    case $what in
      null) blockdev="driver=null-co,node-name=disk,size=17179869184,read-zeroes=on" ;;
      zram) blockdev="driver=host_device,node-name=disk,filename=$dev,cache.direct=on,aio=io_uring" ;;
    esac
    local iothread=iothread,id=io0
    [ "$mode" = event ] && iothread=$iothread,poll-max-ns=0
    $server_cpu qemu-storage-daemon --object "$iothread" --blockdev "$blockdev" \
      --export "type=vhost-user-blk,id=exp,node-name=disk,addr.type=unix,addr.path=$sock,writable=on,num-queues=$queues,iothread=io0" \
      2>>"$dir/qsd.log" &
  fi
  server_pid=$!
  wait_sock "$sock"
}

stop() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# run SIDE BACKING QUEUES RW MODE -> "iops backend_ns client_ns"
run() {
  start "$1" "$2" "$3" "$5"
  local out
  out=$($client_cpu "$load" "$dir/vhost.sock" "$4" 4096 32 "$3" "$runtime" "$server_pid")
  stop
  awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
         print v["iops"], v["backend_ns_per_io"], v["client_ns_per_io"] }' <<<"$out"
}

# stats VALUES... -> "median min max"
stats() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { printf "%s %s %s\n", a[int((NR + 1) / 2)], a[1], a[NR] }'; }

echo "vhost-user-blk: libblkio client, 4k, depth 32 per queue, ${runtime}s per run, $pairs alternating pairs"
echo "$(nproc) CPUs; $(uname -r); $(qemu-storage-daemon --version | head -1); placement: ${PIN:-by the scheduler}"
printf '%-26s %-6s %26s %26s %8s %12s %12s %8s\n' case queues "mqblk IOPS med [min-max]" \
  "qsd IOPS med [min-max]" ratio "mqblk ns/IO" "qsd ns/IO" "cpu"
for what in $backings; do
  if [ "$what" = zram ]; then
    size_mib=1024
    modprobe zram 2>/dev/null || true
    if [ -e /sys/class/zram-control/hot_add ]; then
      zram="zram$(cat /sys/class/zram-control/hot_add)"
      echo "${size_mib}M" >"/sys/block/$zram/disksize"
      dev=/dev/$zram
    else
      backing=$(mktemp /dev/shm/mqblk-vhost.XXXXXX)
      truncate -s "${size_mib}M" "$backing"
      loopdev=$(losetup -f --show "$backing")
      dev=$loopdev
      echo "(no zram here: a loop device over tmpfs, $dev)"
    fi
    fio --name=fill --filename="$dev" --ioengine=io_uring --direct=1 --rw=write --bs=1m \
      --iodepth=8 --size="${size_mib}M" --output-format=terse >/dev/null
  fi
  for mode in $modes; do
  for queues in 1 2; do
    for rw in randread randwrite; do
      m_iops=() q_iops=() m_cpu=() q_cpu=()
      for p in $(seq "$pairs"); do
        if [ $((p % 2)) -eq 1 ]; then order="mqblk qsd"; else order="qsd mqblk"; fi
        for side in $order; do
          read -r iops cpu _ < <(run "$side" "$what" "$queues" "$rw" "$mode")
          if [ "$side" = mqblk ]; then m_iops+=("$iops"); m_cpu+=("$cpu"); else q_iops+=("$iops"); q_cpu+=("$cpu"); fi
        done
      done
      read -r mm mlo mhi < <(stats "${m_iops[@]}")
      read -r qm qlo qhi < <(stats "${q_iops[@]}")
      read -r mc _ _ < <(stats "${m_cpu[@]}")
      read -r qc _ _ < <(stats "${q_cpu[@]}")
      printf '%-26s %-6s %26s %26s %7.2fx %12s %12s %7.2fx\n' "$what $mode $rw" "$queues" \
        "$mm [$mlo-$mhi]" "$qm [$qlo-$qhi]" "$(awk -v a="$mm" -v b="$qm" 'BEGIN { print a / b }')" \
        "$mc" "$qc" "$(awk -v a="$mc" -v b="$qc" 'BEGIN { print a / b }')"
    done
  done
  done
done
