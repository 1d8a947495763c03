#!/usr/bin/env bash
# Side-by-side file-driver comparison, in one run, against the same block
# device: mqblk bench on the file driver (io_uring) versus fio's io_uring
# engine, with the same options:
#   mqblk bench --device=file:DEV,direct=1 --rw=R --bs=B --iodepth=32 --numjobs=N ...
#   fio --ioengine=io_uring --direct=1 --filename=DEV --rw=R --bs=B --iodepth=32 --numjobs=N ...
# DEV is /dev/zram0 when the kernel has zram, otherwise a loop device over a
# file on tmpfs (/dev/shm), created here, filled with data, and removed at
# the end (also on error or Ctrl-C).
#
# Reported per run: IOPS, bandwidth, CPU time per I/O of the job threads
# (fio: usr_cpu+sys_cpu of its jobs; mqblk: the same fields, whose total
# is mqblk.ns_per_io_cpu), and CPU time per I/O of the whole process
# (getrusage of the child: every thread, helper threads included), then
# mqblk/fio ratios.
#
# A loop device's speed swings from run to run (its kworkers and the
# benchmark share two CPUs here), so each pair runs REPEAT times, in
# alternating order, and the medians are reported.
#
# Usage: scripts/compare-file.sh [RUNTIME_SECONDS] [REPEAT] [EXTRA_DEVICE_OPTIONS]
#   RUNTIME_SECONDS       default 5
#   REPEAT                default 3
#   EXTRA_DEVICE_OPTIONS  appended to mqblk's spec, e.g. ",wait=poll"
# Needs root (losetup / zram), fio, python3 and /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-5}
repeat=${2:-3}
extra=${3:-}
for t in fio python3 losetup /usr/bin/time; do
  command -v "$t" >/dev/null || { echo "compare-file: $t is missing" >&2; exit 1; }
done
cargo build --release -q -p mqblk-cli
mqblk=$PWD/target/release/mqblk
dir=$(mktemp -d)
backing=""
loopdev=""
zram=""
cleanup() {
  [ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null || true
  [ -n "$backing" ] && rm -f "$backing"
  if [ -n "$zram" ]; then
    echo 1 > "/sys/block/$zram/reset" 2>/dev/null || true
    echo "${zram#zram}" > /sys/class/zram-control/hot_remove 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

size_mib=1024
# zram may be a module (modprobe) or built in (zram-control exists).
modprobe zram 2>/dev/null || true
if [ -e /sys/class/zram-control/hot_add ]; then
  zram="zram$(cat /sys/class/zram-control/hot_add)"
  echo "${size_mib}M" > "/sys/block/$zram/disksize"
  dev=/dev/$zram
  kind="zram ($dev, ${size_mib} MiB)"
else
  backing=$(mktemp /dev/shm/mqblk-compare.XXXXXX)
  truncate -s "${size_mib}M" "$backing"
  loopdev=$(losetup -f --show "$backing")
  dev=$loopdev
  kind="loop device ($dev) over a ${size_mib} MiB file on tmpfs (no zram here)"
fi
# Fill the device so reads hit data, not holes.
fio --name=fill --filename="$dev" --ioengine=io_uring --direct=1 --rw=write --bs=1m \
    --iodepth=8 --size="${size_mib}M" --output-format=terse >/dev/null

echo "device: $kind; $(nproc) CPUs; $(uname -r); runtime ${runtime}s each"
echo "mqblk spec: file:$dev,direct=1$extra"
printf '%-28s %-6s %10s %10s %14s %14s\n' case tool IOPS "BW MiB/s" "job ns/IO" "process ns/IO"

summ() { # json rusage-file tool -> "iops bw job_ns proc_ns"
  python3 - "$@" <<'PY'
import json, sys
path, rus = sys.argv[1:3]
jobs = json.load(open(path))["jobs"]
iops = sum(x["read"]["iops"] + x["write"]["iops"] for x in jobs)
ios = sum(x["read"]["total_ios"] + x["write"]["total_ios"] for x in jobs)
bw = sum(x["read"]["bw_bytes"] + x["write"]["bw_bytes"] for x in jobs)
# usr_cpu/sys_cpu are percentages of each job's runtime.
job_cpu = 0.0
for x in jobs:
    rt = max(x["read"]["runtime"], x["write"]["runtime"]) / 1000.0
    job_cpu += (x["usr_cpu"] + x["sys_cpu"]) / 100.0 * rt
u, s = open(rus).read().split()[-2:]
proc = float(u) + float(s)
print(iops, bw, job_cpu * 1e9 / max(ios, 1), proc * 1e9 / max(ios, 1))
PY
}

run_mqblk() {
  /usr/bin/time -f '%U %S' -o "$dir/mqblk.rus" \
    "$mqblk" bench --device="file:$dev,direct=1$extra" "$@" > "$dir/mqblk.json"
  summ "$dir/mqblk.json" "$dir/mqblk.rus" >> "$dir/mqblk.runs"
}

run_fio() {
  /usr/bin/time -f '%U %S' -o "$dir/fio.rus" \
    fio --name=x --filename="$dev" --ioengine=io_uring --direct=1 "$@" > "$dir/fio.json"
  summ "$dir/fio.json" "$dir/fio.rus" >> "$dir/fio.runs"
}

run_case() { # rw bs numjobs
  local rw=$1 bs=$2 nj=$3 case="$1 bs=$2 numjobs=$3"
  local common=(--rw="$rw" --bs="$bs" --iodepth=32 --numjobs="$nj" --runtime="$runtime" --time_based
                --output-format=json)
  : > "$dir/mqblk.runs"; : > "$dir/fio.runs"
  for i in $(seq "$repeat"); do
    if [ $((i % 2)) = 1 ]; then run_mqblk "${common[@]}"; run_fio "${common[@]}"
    else run_fio "${common[@]}"; run_mqblk "${common[@]}"; fi
  done
  python3 - "$dir/mqblk.runs" "$dir/fio.runs" "$case" <<'PY'
import statistics, sys
def load(p):
    rows = [[float(x) for x in l.split()] for l in open(p) if l.strip()]
    return [statistics.median(c) for c in zip(*rows)], [r[0] for r in rows]
m, mi = load(sys.argv[1]); f, fi = load(sys.argv[2]); case = sys.argv[3]
for tool, v, runs in (("mqblk", m, mi), ("fio", f, fi)):
    print(f"{case:<28s} {tool:<6s} {v[0]:10.0f} {v[1] / 2**20:10.1f} {v[2]:14.0f} {v[3]:14.0f}"
          f"   IOPS runs: {' '.join(f'{x:.0f}' for x in runs)}")
print(f"{'':28s} {'ratio':<6s} {m[0] / f[0]:10.3f} {m[1] / f[1]:10.3f} {m[2] / f[2]:14.3f}"
      f" {m[3] / f[3]:14.3f}   (mqblk/fio, medians)")
PY
}

run_case randread 4k 1
run_case randread 4k 2
run_case randwrite 4k 1
run_case randwrite 4k 2
run_case randread 1m 1
run_case randwrite 1m 1
