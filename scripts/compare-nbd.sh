#!/usr/bin/env bash
# Side-by-side NBD server comparison, in one run, on the same kind of
# socket (unix), with fio's nbd engine as the client:
#   mqblk serve --device=ram,size=1G      vs      nbdkit memory 1G
# Both are filled first (so reads hit data, not holes), then measured with
#   fio --ioengine=nbd --rw=randread --bs=4k --iodepth=32
# Reported: IOPS (fio) and the server's CPU time per I/O, from
# /proc/PID/stat (utime+stime ticks x 1e9/CLK_TCK / total I/Os).
#
# Usage: scripts/compare-nbd.sh [RUNTIME_SECONDS]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
for t in fio nbdkit; do
  command -v "$t" >/dev/null || { echo "compare-nbd: $t is missing (apt-get install fio nbdkit)" >&2; exit 1; }
done
cargo build --release -q -p mqblk-cli
mqblk=${CARGO_TARGET_DIR:-target}/release/mqblk
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

"$mqblk" serve --device=ram,size=1G --socket "$dir/mqblk.sock" 2>"$dir/mqblk.log" &
pids+=($!); mqblk_pid=$!
nbdkit -f -U "$dir/nbdkit.sock" memory 1G &
pids+=($!); nbdkit_pid=$!
for s in mqblk nbdkit; do
  for _ in $(seq 100); do [ -S "$dir/$s.sock" ] && break; sleep 0.05; done
done

clk=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # name pid uri
  local name=$1 pid=$2 uri=$3
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size=1G \
      --output-format=terse >/dev/null
  local t0; t0=$(cpu_ticks "$pid")
  fio --name=randread --ioengine=nbd --uri="$uri" --rw=randread --bs=4k --iodepth=32 \
      --runtime="$runtime" --time_based --size=1G --output-format=json --output="$dir/$name.json" >/dev/null
  local t1; t1=$(cpu_ticks "$pid")
  python3 - "$dir/$name.json" "$name" "$((t1 - t0))" "$clk" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["read"]
name, ticks, clk = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ios = j["total_ios"]
print(f"{name:8s} IOPS={j['iops']:>10.0f}  ios={ios:>9d}  server_cpu={ticks / clk:6.2f}s"
      f"  server_ns_per_io={ticks * 1e9 / clk / max(ios, 1):8.0f}"
      f"  clat_p50={j['clat_ns']['percentile']['50.000000'] / 1000:.1f}us")
PY
}

echo "fio nbd engine, randread bs=4k iodepth=32, ${runtime}s, unix sockets, $(nproc) CPUs"
run mqblk "$mqblk_pid" "nbd+unix:///?socket=$dir/mqblk.sock"
run nbdkit "$nbdkit_pid" "nbd+unix:///?socket=$dir/nbdkit.sock"
