#!/usr/bin/env bash
# Side-by-side figures for the core layer on the null device, in one run:
#  1. mqblk (mq, 1 job) vs fio --ioengine=null, randread 4k QD32, stats on;
#  2. scaling 1 → 2 jobs in each queue mode, one device;
#  3. two null devices, two jobs (one per device), in each queue mode
#     (the 2.4-era experiment: one lock for all disks vs one per disk).
# Usage: scripts/compare-null.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
cargo build --release -q -p mqblk-cli
mqblk=target/release/mqblk
command -v fio >/dev/null || { echo "fio is needed (apt-get install fio)"; exit 1; }

common=(--rw=randread --bs=4k --iodepth=32 --runtime="$secs" --time_based)

mq_json() { "$mqblk" bench "${common[@]}" --output-format=json "$@"; }
iops() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(j["read"]["iops"] for j in d["jobs"]))'; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d['mqblk']['$1'])"; }

echo "== 1. null device, 1 job, randread 4k QD32"
fio_out=$(fio --name=null --ioengine=null --size=100g "${common[@]}" --numjobs=1 --output-format=json)
fio_iops=$(echo "$fio_out" | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(j["read"]["iops"])')
mq_out=$(mq_json --numjobs=1 --device null)
mq_iops=$(echo "$mq_out" | iops)
printf "fio null engine: %12.0f IOPS\n" "$fio_iops"
printf "mqblk (mq):      %12.0f IOPS  allocs_per_io=%s bytes_copied=%s ns_per_io_cpu=%s descriptor_bytes=%s\n" \
  "$mq_iops" "$(echo "$mq_out" | field allocs_per_io)" "$(echo "$mq_out" | field bytes_copied)" \
  "$(echo "$mq_out" | field ns_per_io_cpu)" "$(echo "$mq_out" | field descriptor_bytes)"
python3 -c "print('ratio mqblk/fio: %.2f' % ($mq_iops / $fio_iops))"

echo "== 2. scaling on one null device"
for mode in mq device-lock global-lock; do
  one=$(mq_json --numjobs=1 --queue-mode="$mode" --device null | iops)
  two=$(mq_json --numjobs=2 --queue-mode="$mode" --device null | iops)
  python3 -c "print('%-12s 1 job %12.0f  2 jobs %12.0f  scaling %.2fx' % ('$mode', $one, $two, $two / $one))"
done

echo "== 3. two null devices, two jobs (one per device)"
for mode in mq device-lock global-lock; do
  v=$(mq_json --numjobs=2 --queue-mode="$mode" --device null --device null | iops)
  python3 -c "print('%-12s %12.0f IOPS' % ('$mode', $v))"
done
