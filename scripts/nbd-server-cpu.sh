#!/usr/bin/env bash
# NBD server CPU per I/O, the three servers side by side in one run (the
# acceptance figure of issue 29; section 1 of compare-nbd.sh measures IOPS
# and mqblk against nbdkit only):
#
#   mqblk serve --device=ram,size=1G   nbdkit memory 1G   qemu-nbd (1 GiB raw
#   file in /dev/shm, or the scratch directory where there is none)
#
# fio's nbd engine, 4k randread at iodepth 32, with 1 job and with 4 jobs
# (each job its own connection), over unix sockets; every export filled
# first. A server's CPU per I/O is its process's utime+stime
# (/proc/PID/stat) over the run, divided by the I/Os fio did. Each round
# runs the servers in turn, reversing the order every other round, so that
# load from elsewhere on a shared machine lands on all of them; the
# figure to quote is the median ratio over the rounds.
#
# Last, the floor under any server: scripts/nbd-reply-floor.c.
#
# Usage: scripts/nbd-server-cpu.sh [RUNTIME_SECONDS] [ROUNDS] [RW]
#   (defaults: 5 seconds, 3 rounds, randread)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-5}
rounds=${2:-3}
rw=${3:-randread}
for t in fio nbdkit qemu-nbd python3; do
  command -v "$t" >/dev/null || { echo "nbd-server-cpu: $t is missing" >&2; exit 1; }
done
cargo build --release -q -p mqblk-cli
mqblk=${CARGO_TARGET_DIR:-target}/release/mqblk
dir=$(mktemp -d)
shm=$dir
[ -d /dev/shm ] && [ -w /dev/shm ] && shm=$(mktemp -d /dev/shm/nbd-server-cpu.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir" "$shm"
}
trap cleanup EXIT

wait_sock() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; exit 1; }
clk=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sys_ticks() { awk '{print $15}' "/proc/$1/stat"; }

servers=(mqblk nbdkit qemu-nbd)
declare -A pid
"$mqblk" serve --device=ram,size=1G --socket "$dir/mqblk.sock" 2>"$dir/mqblk.log" &
pid[mqblk]=$!
nbdkit -f -U "$dir/nbdkit.sock" memory 1G &
pid[nbdkit]=$!
truncate -s 1G "$shm/qemu.img"
qemu-nbd -k "$dir/qemu-nbd.sock" -f raw -e 8 -t --cache=writeback "$shm/qemu.img" &
pid[qemu-nbd]=$!
pids+=("${pid[@]}")
for s in "${servers[@]}"; do
  wait_sock "$dir/$s.sock"
  fio --name=fill --ioengine=nbd --uri="nbd+unix:///?socket=$dir/$s.sock" --rw=write --bs=1M \
    --iodepth=8 --size=1G --output-format=terse >/dev/null
done

run() { # server jobs -> "iops ns_per_io sys_ns_per_io"
  local s=$1 jobs=$2 t0 t1 k0 k1
  t0=$(cpu_ticks "${pid[$s]}")
  k0=$(sys_ticks "${pid[$s]}")
  fio --name="$s" --ioengine=nbd --uri="nbd+unix:///?socket=$dir/$s.sock" --rw="$rw" --bs=4k \
    --iodepth=32 --numjobs="$jobs" --group_reporting --runtime="$runtime" --time_based \
    --size=1G --output-format=json --output="$dir/fio.json" >/dev/null
  t1=$(cpu_ticks "${pid[$s]}")
  k1=$(sys_ticks "${pid[$s]}")
  python3 - "$dir/fio.json" "$rw" "$((t1 - t0))" "$clk" "$((k1 - k0))" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["read"] if "read" in sys.argv[2] else j["write"]
ios = max(d["total_ios"], 1)
ns = 1e9 / int(sys.argv[4]) / ios
print(f"{d['iops']:.0f} {int(sys.argv[3]) * ns:.0f} {int(sys.argv[5]) * ns:.0f}")
PY
}

echo "== NBD server CPU per I/O: fio nbd engine, 4k $rw, iodepth 32, ${runtime}s per run, $(nproc) CPUs, $(uptime | sed 's/.*load/load/')"
for jobs in 1 4; do
  rows=()
  for r in $(seq "$rounds"); do
    order=("${servers[@]}")
    if ((r % 2 == 0)); then order=(qemu-nbd nbdkit mqblk); fi
    declare -A res=()
    for s in "${order[@]}"; do res[$s]=$(run "$s" "$jobs"); done
    rows+=("${res[mqblk]} ${res[nbdkit]} ${res[qemu-nbd]}")
  done
  python3 - "$jobs" "${rows[@]}" <<'PY'
import statistics, sys
jobs, rows = sys.argv[1], [list(map(float, r.split())) for r in sys.argv[2:]]
for i, (mi, mn, ms, ki, kn, ks, qi, qn, qs) in enumerate(rows, 1):
    print(f"  {jobs} job(s) round {i}: IOPS mqblk {mi:7.0f} nbdkit {ki:7.0f} qemu-nbd {qi:7.0f}"
          f"   ns/IO (of it in the kernel) mqblk {mn:6.0f} ({ms:.0f}) nbdkit {kn:6.0f} ({ks:.0f})"
          f" qemu-nbd {qn:6.0f} ({qs:.0f})"
          f"   mqblk/nbdkit {mn / kn:.3f}  mqblk/qemu-nbd {mn / qn:.3f}")
print(f"  {jobs} job(s) median: server CPU per I/O mqblk/nbdkit "
      f"{statistics.median(r[1] / r[4] for r in rows):.3f}, mqblk/qemu-nbd "
      f"{statistics.median(r[1] / r[7] for r in rows):.3f}; mqblk's kernel time alone / nbdkit's "
      f"total {statistics.median(r[2] / r[4] for r in rows):.3f}")
PY
done

# The floor: a thread that only reads requests and writes 4 KiB replies
# over a unix socket pair (scripts/nbd-reply-floor.c), one reply per write
# as a server must when requests come one per wake-up (fio's nbd engine
# sends the next as each reply arrives), then 8 replies per writev.
if command -v cc >/dev/null; then
  cc -O2 -pthread -o "$dir/floor" scripts/nbd-reply-floor.c
  echo "== the floor: a server thread that does nothing but the socket calls"
  for batch in 1 8; do echo "  $("$dir/floor" 1000000 32 "$batch")"; done
else
  echo "nbd-server-cpu: no C compiler: the floor is not measured" >&2
fi
