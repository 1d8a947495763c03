#!/usr/bin/env bash
# The block-layer services, measured: large I/O not chopped, max_sectors
# splitting, vectored I/O cost, merging and nomerges.
# Usage: scripts/services-figures.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3}
cargo build --release -q -p mqblk-cli
mqblk=target/release/mqblk
show() {
  python3 -c '
import json,sys
d=json.load(sys.stdin); m=d["mqblk"]; j=d["jobs"][0]
io=j["read"]["iops"]+j["write"]["iops"]
print("IOPS=%-10.0f requests=%-9d bios=%-9d requests/bios=%.3f merges=%d splits=%d bytes_copied=%d allocs_per_io=%s" % (
  io, m["requests"], m["bios"], m["requests"]/max(m["bios"],1), m["merges"], m["splits"], m["bytes_copied"], m["allocs_per_io"]))'
}
run() { printf "%-58s " "$*"; "$mqblk" bench --output-format=json "$@" | show; }
t=(--runtime="$secs" --time_based)
run --device null --rw=randread --bs=128k --iodepth=32 "${t[@]}"
run --device null,max_sectors=64 --rw=randread --bs=128k --iodepth=32 "${t[@]}"
for dev in null ram,size=1G; do
  run --device "$dev" --rw=randread --bs=64k --iodepth=32 --segments=1 "${t[@]}"
  run --device "$dev" --rw=randread --bs=64k --iodepth=32 --segments=16 "${t[@]}"
done
run --device null --rw=write --bs=4k --iodepth=32 "${t[@]}"
run --device null,nomerges=2 --rw=write --bs=4k --iodepth=32 "${t[@]}"
