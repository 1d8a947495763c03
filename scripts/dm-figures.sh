#!/usr/bin/env bash
# Striping acceptance figures (issue: stacked devices), side by side in one
# run, with mqblk bench:
#
#  1. NBD: `striped 2 128` over two `mqblk serve` exports (ram-backed,
#     LEG_MIB each, unix sockets) against one of those exports alone:
#     4k randread at iodepth 64, one job. Both exports are filled first.
#     Each configuration runs one, stripe, stripe, one (two pairs in
#     alternating order, so load from elsewhere shows as a difference
#     between the pairs rather than as a bias). Printed: IOPS, the ratio
#     stripe/one (target >= 1.7), each run's client CPU per I/O, and the
#     CPUs the run kept busy (the bench process's CPU time plus both
#     servers' utime+stime, over the run time): near the machine's count, the run is
#     bound by CPU, not by the export.
#  1b. The same over two exports whose device, not the CPU, is the limit:
#     `null,completion=timer,completion_nsec=N,queue_depth=16`, with N
#     100 us (issue 10's timed device: at most 160k IOPS per export) and
#     1 ms (a remote disk: at most 16k IOPS per export). Section 1's exports are bound by CPU on
#     a machine with few cores: one export's server thread and the client
#     already fill about 1.2 CPUs, and a stripe over two cannot go past
#     the CPUs left. Here the servers sleep on the device's completion
#     timer, and the stripe shows what striping adds when each leg is a
#     device with its own limit.
#  2. Files: `striped 2 128` over two files against the same two files as
#     two jobs (--numjobs=2, job i on file i), both with --numjobs=2 at
#     iodepth 32, 4k randread, O_DIRECT (the file device's default; where
#     the file system refuses it, `mqblk info` notes the fallback, printed
#     below). Printed: IOPS and the ratio (target within 10%).
#
# Usage: scripts/dm-figures.sh [RUNTIME_SECONDS] [LEG_MIB] [FILE_DIR]
#   (defaults: 10 s per run, 1024 MiB per leg, a temp dir for the files)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
leg_mib=${2:-1024}
cargo build --release -q -p mqblk-cli
mqblk=${CARGO_TARGET_DIR:-target}/release/mqblk
dir=$(mktemp -d)
fdir=$(mktemp -d "${3:-${TMPDIR:-/tmp}}/mqblk-dm-figures.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir" "$fdir"
}
trap cleanup EXIT
wait_sock() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; exit 1; }

# bench ARGS... -> "iops client_ns_per_io client_cpu_seconds" for a 4k
# randread; the client's CPU is the whole bench process's (its NBD receive
# threads included), from getrusage.
bench() {
  python3 - "$dir/bench.json" "$mqblk" bench "$@" --rw=randread --bs=4k --runtime="$runtime" \
    --time_based --output-format=json <<'PY'
import json, resource, subprocess, sys
with open(sys.argv[1], "w") as f:
    subprocess.run(sys.argv[2:], stdout=f, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = r.ru_utime + r.ru_stime
j = json.load(open(sys.argv[1]))
ios = sum(x["read"]["total_ios"] for x in j["jobs"])
iops = sum(x["read"]["iops"] for x in j["jobs"])
print(f"{iops:.0f} {cpu * 1e9 / max(ios, 1):.0f} {cpu:.3f}")
PY
}
clk=$(getconf CLK_TCK)
server_ticks() { local t=0; for p in "${pids[@]}"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }
# busy CLIENT_CPU_SECONDS TICKS0 TICKS1 -> CPUs busy during the run
busy() { python3 -c "import sys; c, t0, t1, clk, rt = map(float, sys.argv[1:]); print(f'{(c + (t1 - t0) / clk) / rt:.2f}')" "$1" "$2" "$3" "$clk" "$runtime"; }
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / max(float(sys.argv[2]), 1):.2f}')" "$1" "$2"; }

echo "== 1. NBD: striped 2 128 over two mqblk serve exports vs one export;" \
     "4k randread, iodepth 64, 1 job, ${runtime}s per run, $(nproc) CPUs"
for s in a b; do
  "$mqblk" serve --device="ram,size=${leg_mib}M" --socket "$dir/$s.sock" 2>"$dir/$s.log" &
  pids+=($!)
done
wait_sock "$dir/a.sock"; wait_sock "$dir/b.sock"
a="nbd+unix:///?socket=$dir/a.sock"
b="nbd+unix:///?socket=$dir/b.sock"
sectors=$((leg_mib * 2048))
stripe="dm-table:0 $((2 * sectors)) striped 2 128 $a 0 $b 0"
# Fill both legs through the stripe (ram reads of holes are cheaper).
"$mqblk" bench --device="$stripe" --rw=write --bs=1M --iodepth=8 --output-format=normal >/dev/null
run_one() { local t0; t0=$(server_ticks); read -r one one_ns one_c < <(bench --device="$a" --iodepth=64); one_b=$(busy "$one_c" "$t0" "$(server_ticks)"); }
run_st() { local t0; t0=$(server_ticks); read -r st st_ns st_c < <(bench --device="$stripe" --iodepth=64); st_b=$(busy "$st_c" "$t0" "$(server_ticks)"); }
# Two pairs, one export then the stripe and the other way round; then the
# servers are stopped.
pairs() {
  printf "%-6s %12s %12s %7s %10s %10s %9s %9s\n" pair one_iops stripe_iops ratio one_ns stripe_ns one_cpus st_cpus
  for pair in 1 2; do
    if [ "$pair" = 1 ]; then run_one; run_st; else run_st; run_one; fi
    printf "%-6s %12s %12s %7s %10s %10s %9s %9s\n" "$pair" "$one" "$st" "$(ratio "$st" "$one")" "$one_ns" "$st_ns" "$one_b" "$st_b"
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}
pairs

for nsec in 100000 1000000; do
timed="null,size=${leg_mib}M,completion=timer,completion_nsec=$nsec,queue_depth=16"
echo "== 1b. NBD, device-bound: the same over two exports of $timed"
rm -f "$dir/a.sock" "$dir/b.sock"
for s in a b; do
  "$mqblk" serve --device="$timed" --socket "$dir/$s.sock" 2>"$dir/$s.log" &
  pids+=($!)
done
wait_sock "$dir/a.sock"; wait_sock "$dir/b.sock"
pairs
done

echo "== 2. Files: striped 2 128 over two files vs --numjobs=2 on the same files;" \
     "4k randread, 2 jobs at iodepth 32, ${runtime}s per run, in $fdir"
fmib=$((leg_mib < 512 ? leg_mib : 512))
for s in a b; do
  "$mqblk" bench --device="file:$fdir/$s.img,size=${fmib}M,create=1" --rw=write --bs=1M \
    --iodepth=8 --output-format=normal >/dev/null 2>"$dir/fill.log" ||
    { dd if=/dev/urandom of="$fdir/$s.img" bs=1M count="$fmib" status=none; }
done
"$mqblk" info "file:$fdir/a.img" | grep -E "engine|note" || true
fsect=$((fmib * 2048))
fstripe="dm-table:0 $((2 * fsect)) striped 2 128 file:$fdir/a.img 0 file:$fdir/b.img 0"
printf "%-6s %12s %12s %7s %10s %10s\n" pair files_iops stripe_iops ratio files_ns stripe_ns
for pair in 1 2; do
  if [ "$pair" = 1 ]; then
    read -r fi fi_ns _ < <(bench --device="file:$fdir/a.img" --device="file:$fdir/b.img" --numjobs=2 --iodepth=32)
    read -r st st_ns _ < <(bench --device="$fstripe" --numjobs=2 --iodepth=32)
  else
    read -r st st_ns _ < <(bench --device="$fstripe" --numjobs=2 --iodepth=32)
    read -r fi fi_ns _ < <(bench --device="file:$fdir/a.img" --device="file:$fdir/b.img" --numjobs=2 --iodepth=32)
  fi
  printf "%-6s %12s %12s %7s %10s %10s\n" "$pair" "$fi" "$st" "$(ratio "$st" "$fi")" "$fi_ns" "$st_ns"
done
