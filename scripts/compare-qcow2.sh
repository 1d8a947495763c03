#!/usr/bin/env bash
# qcow2 figures (issue 37's Speed section), each measured in one run:
#
#  1. fio's nbd engine against `mqblk serve qcow2:IMG` and `qemu-nbd -f
#     qcow2 IMG`, 4k at iodepth 32, with 1 job and with 4 jobs (each job
#     its own connection), unix sockets:
#       a. randread of a fully allocated 1 GiB image (64 KiB clusters,
#          made by qemu-img convert from random data), both servers
#          read-only on the same image;
#       b. randwrite to a fresh image (every write allocates, or lands in
#          a cluster an earlier write allocated), a new image per run.
#     Pairs alternate (mqblk, qemu-nbd, then qemu-nbd, mqblk, ...), and
#     the figure is the median over the pairs of mqblk/qemu-nbd: IOPS, and
#     the server's CPU per I/O (utime+stime of its process from
#     /proc/PID/stat, over the I/Os fio did).
#  2. The local driver: `mqblk bench` 4k randread at iodepth 32 through
#     `qcow2:IMG` against `file:RAW` holding the same data on the same file
#     system (both through the page cache, direct=0, as the qcow2 driver's
#     file device runs), alternating, median of the pairs.
#  3. The L2 cache: its memory and hit rate over the runs of section 2,
#     and the hardware queues' L2 slices (their memory, the requests
#     planned from them without the lock, the clones sent to the file)
#     (MQBLK_QCOW2_STATS=1 makes each image print them when it closes).
#
# Files live in /dev/shm when there is one (the scratch directory else).
#
# Usage: scripts/compare-qcow2.sh [RUNTIME_SECONDS] [PAIRS]
#   (defaults: 10 seconds per run, 5 pairs)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
pairs=${2:-5}
for t in fio qemu-nbd qemu-img python3; do
  command -v "$t" >/dev/null || { echo "compare-qcow2: $t is missing" >&2; exit 1; }
done
cargo build --release -q -p mqblk-cli
mqblk=${CARGO_TARGET_DIR:-target}/release/mqblk
dir=$(mktemp -d)
shm=$dir
[ -d /dev/shm ] && [ -w /dev/shm ] && shm=$(mktemp -d /dev/shm/compare-qcow2.XXXXXX)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$dir" "$shm"
}
trap cleanup EXIT

wait_sock() { for _ in $(seq 400); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; exit 1; }
clk=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# start NAME IMG RO: a server on $dir/NAME.sock, its pid in $server.
start() {
  local name=$1 img=$2 ro=$3
  rm -f "$dir/$name.sock"
  if [ "$name" = mqblk ]; then
    local r=(); [ "$ro" = 1 ] && r=(--read-only)
    "$mqblk" serve "qcow2:$img" --socket "$dir/$name.sock" "${r[@]}" 2>"$dir/$name.log" &
  else
    local r=(); [ "$ro" = 1 ] && r=(-r)
    qemu-nbd -k "$dir/$name.sock" -f qcow2 -e 8 -t --cache=writeback --aio=io_uring "${r[@]}" "$img" \
      2>"$dir/$name.log" &
  fi
  server=$!
  wait_sock "$dir/$name.sock"
}
stop() { kill "$server"; wait "$server" 2>/dev/null || true; server=; }

# run NAME RW JOBS: fio on NAME's socket; prints "iops ns_per_io".
run() {
  local name=$1 rw=$2 jobs=$3 t0 t1
  t0=$(cpu_ticks "$server")
  fio --name="$name" --ioengine=nbd --uri="nbd+unix:///?socket=$dir/$name.sock" --rw="$rw" \
    --bs=4k --iodepth=32 --numjobs="$jobs" --group_reporting --runtime="$runtime" --time_based \
    --size=1G --output-format=json --output="$dir/fio.json" >/dev/null
  t1=$(cpu_ticks "$server")
  python3 - "$dir/fio.json" "$rw" "$((t1 - t0))" "$clk" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["read"] if sys.argv[2] == "randread" else j["write"]
ticks, clk = int(sys.argv[3]), int(sys.argv[4])
print(f"{d['iops']:.0f} {ticks * 1e9 / clk / max(d['total_ios'], 1):.0f}")
PY
}

median_table() { # file of "name iops ns" lines, two per pair
  python3 - "$1" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
m = [(float(r[1]), float(r[2])) for r in rows if r[0] == "mqblk"]
q = [(float(r[1]), float(r[2])) for r in rows if r[0] == "qemu-nbd"]
iops = [a[0] / b[0] for a, b in zip(m, q)]
cpu = [a[1] / b[1] for a, b in zip(m, q) if b[1] > 0]
print(f"  mqblk IOPS {statistics.median(a for a, _ in m):.0f}, qemu-nbd {statistics.median(b for b, _ in q):.0f};"
      f" IOPS ratio median {statistics.median(iops):.2f}x (pairs: {' '.join(f'{x:.2f}' for x in iops)});"
      f" server CPU/IO mqblk {statistics.median(a for _, a in m):.0f} ns, qemu-nbd {statistics.median(b for _, b in q):.0f} ns,"
      f" ratio median {statistics.median(cpu):.2f}x")
PY
}

echo "== images: 1 GiB, 64 KiB clusters, in $shm; $(nproc) CPUs; ${runtime}s per run, $pairs pairs"
head -c 1G /dev/urandom >"$shm/full.raw"
qemu-img convert -O qcow2 -o cluster_size=65536 "$shm/full.raw" "$shm/full.qcow2"

echo "== 1a. randread, fully allocated image, read-only servers"
for jobs in 1 4; do
  : >"$dir/rows"
  for p in $(seq "$pairs"); do
    order=(mqblk qemu-nbd); [ $((p % 2)) = 0 ] && order=(qemu-nbd mqblk)
    for s in "${order[@]}"; do
      start "$s" "$shm/full.qcow2" 1
      echo "$s $(run "$s" randread "$jobs")" >>"$dir/rows"
      stop
    done
  done
  echo " jobs=$jobs:"; median_table "$dir/rows"
done

echo "== 1b. randwrite, fresh image (allocating), a new image per run"
for jobs in 1 4; do
  : >"$dir/rows"
  for p in $(seq "$pairs"); do
    order=(mqblk qemu-nbd); [ $((p % 2)) = 0 ] && order=(qemu-nbd mqblk)
    for s in "${order[@]}"; do
      rm -f "$shm/fresh.qcow2"
      qemu-img create -q -f qcow2 -o cluster_size=65536 "$shm/fresh.qcow2" 1G
      start "$s" "$shm/fresh.qcow2" 0
      echo "$s $(run "$s" randwrite "$jobs")" >>"$dir/rows"
      stop
      qemu-img check -q "$shm/fresh.qcow2" || echo "  qemu-img check found problems after $s" >&2
    done
  done
  echo " jobs=$jobs:"; median_table "$dir/rows"
done

echo "== 2. local driver: mqblk bench 4k randread iodepth=32, qcow2: against file: (same data, page cache)"
bench() {
  MQBLK_QCOW2_STATS=1 "$mqblk" bench --device="$1" --rw=randread --bs=4k --iodepth=32 --size=1G \
    --runtime="$runtime" --time_based --output-format=json 2>>"$dir/stats" |
    python3 -c 'import json, sys
j = json.load(sys.stdin)
print("%.0f %.0f" % (sum(x["read"]["iops"] for x in j["jobs"]), j["mqblk"]["ns_per_io_cpu"]))'
}
: >"$dir/rows"
for p in $(seq "$pairs"); do
  q=$(bench "qcow2:$shm/full.qcow2,ro=1"); f=$(bench "file:$shm/full.raw,direct=0,ro=1")
  echo "qcow2 $q file $f" >>"$dir/rows"
done
python3 - "$dir/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
r = [float(x[1]) / float(x[4]) for x in rows]
print(f"  qcow2 IOPS {statistics.median(float(x[1]) for x in rows):.0f} ({statistics.median(float(x[2]) for x in rows):.0f} ns CPU/IO),"
      f" file {statistics.median(float(x[4]) for x in rows):.0f} ({statistics.median(float(x[5]) for x in rows):.0f} ns CPU/IO);"
      f" ratio median {statistics.median(r):.2f}x (pairs: {' '.join(f'{x:.2f}' for x in r)})")
PY

echo "== 3. L2 cache (default l2_cache_size; the image's L2 tables take $(( (1 << 30) / 65536 * 8 / 1024 )) KiB)"
grep -E "L2 cache|L2 slices" "$dir/stats" | sed 's/^/  /'

