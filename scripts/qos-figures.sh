#!/usr/bin/env bash
# The QoS figures (schedulers, groups, io.max), each measured with
# `mqblk bench` in one run on the null device with timer completions, so
# that the device is the bottleneck. Prints one block per figure.
#
# Usage: scripts/qos-figures.sh [SECONDS]        (default 5 s a run)
#   MQBLK_BASE=PATH  an mqblk binary built before the QoS work, for the
#                    cost of `none` (skipped, and said, without it)
#   QOS_ONLY="2 3"   run only these figures
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
cargo build --release -q -p mqblk-cli
mqblk=$PWD/target/release/mqblk
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mqblk-qos.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# jq-free field access: python reads the bench JSON.
py() { python3 -c "$1" "${@:2}"; }
field() { # FILE EXPR: EXPR over j (the JSON)
  py "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}
bench() { "$mqblk" bench --eta=never --output-format=json "$@"; }

timer="null,completion=timer,completion_nsec=100000"
sock=$tmp/control
only() { [ -z "${QOS_ONLY:-}" ] || [[ " $QOS_ONLY " == *" $1 "* ]]; }

# flood OUT.json SCHEDULER READER_QD [DEVICE_OPTS]: 4 writers at QD64 and
# one reader on the timer device with queue_depth=8; prints the reader's
# p99 and the writers' IOPS. The reader's stamps (slat_percentiles=1) give
# its total latency, fio's lat: from submit to completion, with any wait
# for a tag inside submit. Its clat starts once the request has a tag.
flood() {
  cat >"$tmp/flood.fio" <<EOF
[global]
device=$timer,queue_depth=8,scheduler=$2${4:+,$4}
runtime=$secs
time_based
[writers]
rw=randwrite
iodepth=64
numjobs=4
[reader]
rw=randread
iodepth=$3
slat_percentiles=1
EOF
  bench "$tmp/flood.fio" >"$1"
  field "$1" "'scheduler=$2${4:+ ($4)}: reader p99 lat %.0f us (clat %.0f us), writers %.0f IOPS' % (j['jobs'][4]['read']['lat_ns']['percentile']['99.000000']/1000, j['jobs'][4]['read']['clat_ns']['percentile']['99.000000']/1000, sum(x['write']['iops'] for x in j['jobs'][:4]))"
}

# compare_flood A.json B.json EXPR: EXPR over a and b, with p (the reader's
# p99 total latency) and w (the writers' IOPS).
compare_flood() {
  py "
import json,sys
a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2]))
p=lambda j: j['jobs'][4]['read']['lat_ns']['percentile']['99.000000']
w=lambda j: sum(x['write']['iops'] for x in j['jobs'][:4])
print($3)
" "$1" "$2"
}

if only 1; then
echo "== 1. io.max accuracy (1 job, QD32, ${secs}s, target: within 2%)"
bench --device="$timer,riops=10000" --rw=randread --iodepth=32 --runtime="$secs" \
  --time_based >"$tmp/riops.json"
field "$tmp/riops.json" "'riops=10000: %.0f IOPS (%+.2f%%)' % (j['jobs'][0]['read']['iops'], (j['jobs'][0]['read']['iops']/10000-1)*100)"
bench --device="$timer,rbps=50m" --rw=randread --bs=64k --iodepth=32 --runtime="$secs" \
  --time_based >"$tmp/rbps.json"
field "$tmp/rbps.json" "'rbps=50m: %.2f MiB/s (%+.2f%%)' % (j['jobs'][0]['read']['bw_bytes']/2**20, (j['jobs'][0]['read']['bw_bytes']/(50*2**20)-1)*100)"

# The same limit on a group, set through the control socket after the
# start (the ramp keeps the unlimited first moments out of the figure).
bench --device="$timer" --rw=randread --iodepth=32 --runtime="$secs" --time_based \
  --ramp_time=1 --cgroup=tenant --control="$sock" >"$tmp/group.json" &
pids+=($!)
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
"$mqblk" qos --control="$sock" group tenant riops=10000 >/dev/null
wait "${pids[-1]}"
field "$tmp/group.json" "'group tenant riops=10000: %.0f IOPS (%+.2f%%)' % (j['jobs'][0]['read']['iops'], (j['jobs'][0]['read']['iops']/10000-1)*100)"

# A limit changed from 10k to 20k half-way: the status reports show it.
bench --device="$timer,riops=10000" --rw=randread --iodepth=32 --runtime=6 --time_based \
  --status-interval=1 --control="$sock" >"$tmp/live.out" &
pids+=($!)
sleep 3.2
"$mqblk" qos --control="$sock" device riops=20000 >/dev/null
echo "  riops 10000 -> 20000 after 3.2 s; --status-interval=1 reports:"
wait "${pids[-1]}"
py "
import json,sys
for line in open(sys.argv[1]):
    line=line.strip()
    try: j=json.loads(line)
    except ValueError: continue
    if not isinstance(j, dict) or 'status' not in j: continue
    iops=sum(x['read']['iops'] for x in j['jobs'])
    print('    t=%5.1fs read IOPS %8.0f' % (j['status']['elapsed_ms']/1000, iops))
" "$tmp/live.out"
fi

echo
if only 2; then
echo "== 2. weighted fair share (weights 100 and 300, QD32 each, device queue_depth=16)"
for s in bfq none; do
  cat >"$tmp/fair.fio" <<EOF
[global]
device=$timer,queue_depth=16,scheduler=$s
rw=randread
iodepth=32
runtime=$secs
time_based
[light]
cgroup=light
cgroup_weight=100
[heavy]
cgroup=heavy
cgroup_weight=300
EOF
  bench "$tmp/fair.fio" >"$tmp/fair-$s.json"
  field "$tmp/fair-$s.json" "'scheduler=$s: light %.0f IOPS, heavy %.0f IOPS, ratio %.2f' % (j['jobs'][0]['read']['iops'], j['jobs'][1]['read']['iops'], j['jobs'][1]['read']['iops']/max(j['jobs'][0]['read']['iops'],1))"
done
fi

echo
if only 3; then
echo "== 3. mq-deadline: 1 reader at QD1 against 4 writers at QD64 (device queue_depth=8)"
# As the device spec gives it (one hardware queue per CPU), then on one
# hardware queue (a single disk's, and null_blk's default).
# mq-deadline as the issue sets it, and with Linux's async_depth tunable
# set to 7: writes may then hold 7 of the device's 8 slots, and a read
# never waits for one.
for q in "" hw_queues=1; do
  flood "$tmp/dl-default.json" "mq-deadline,read_expire=2" 1 "$q"
  flood "$tmp/dl-async7.json" "mq-deadline,read_expire=2,async_depth=7" 1 "$q"
  flood "$tmp/dl-none.json" none 1 "$q"
  for v in default async7; do
    compare_flood "$tmp/dl-$v.json" "$tmp/dl-none.json" \
      "'  ${q:-as specified}, $v: reader p99 deadline/none = %.3f (target <= 0.2); writers deadline/none = %.2f (target >= 0.8)' % (p(a)/p(b), w(a)/w(b))"
  done
done
# The floor no scheduler can go under: the same reader with no writers.
bench --device="$timer,queue_depth=8" --rw=randread --iodepth=1 --runtime="$secs" \
  --time_based --slat_percentiles >"$tmp/alone.json"
field "$tmp/alone.json" "'  the reader alone (no writers): p99 lat %.0f us' % (j['jobs'][0]['read']['lat_ns']['percentile']['99.000000']/1000)"
fi

echo
if only 4; then
echo "== 4. kyber: read target 1 ms, 1 reader at QD4 against 4 writers at QD64 (device queue_depth=8)"
for s in "kyber,read_lat_nsec=1000000" none; do
  flood "$tmp/ky-${s%%,*}.json" "$s" 4
done
compare_flood "$tmp/ky-kyber.json" "$tmp/ky-none.json" \
  "'  kyber reader p99 / 1 ms target = %.2f (target <= 1.5); writers kyber/none = %.2f (target >= 0.5)' % (p(a)/1e6, w(a)/w(b))"
fi

echo
if only 5; then
echo "== 5. cost per I/O on the null device (inline completions, 1 job, QD32, 3 s)"
for s in none mq-deadline kyber bfq; do
  bench --device="null,completion=inline,hw_queues=1,scheduler=$s" --rw=randread \
    --iodepth=32 --runtime=3 --time_based >"$tmp/cost-$s.json"
  field "$tmp/cost-$s.json" "'scheduler=%-12s %6.1f M IOPS, %5.1f ns/IO CPU' % ('$s', j['jobs'][0]['read']['iops']/1e6, j['mqblk']['ns_per_io_cpu'])"
done
if [ -n "${MQBLK_BASE:-}" ]; then
  echo "  scheduler=none, this build against MQBLK_BASE, alternating, 5 runs each:"
  for i in 1 2 3 4 5; do
    for b in base new; do
      bin=$mqblk
      [ $b = base ] && bin=$MQBLK_BASE
      "$bin" bench --output-format=json --device=null --rw=randread --iodepth=32 \
        --runtime=3 --time_based 2>/dev/null |
        py "import json,sys; print('$b', json.load(sys.stdin)['jobs'][0]['read']['iops'])"
    done
  done >"$tmp/ab.txt"
  py "
import statistics,sys
v={'base':[], 'new':[]}
for line in open(sys.argv[1]):
    k,x=line.split(); v[k].append(float(x))
b=statistics.median(v['base']); n=statistics.median(v['new'])
print('  median base %.2fM, this build %.2fM: %+.1f%% (runs: base %s; new %s)' % (b/1e6, n/1e6, (n/b-1)*100,
  ' '.join('%.1f' % (x/1e6) for x in v['base']), ' '.join('%.1f' % (x/1e6) for x in v['new'])))
" "$tmp/ab.txt"
else
  echo "  (set MQBLK_BASE to an mqblk built before the QoS work to compare none's cost)"
fi
fi

echo
if only 6; then
echo "== 6. the scheduler switched 100 times under a 10 s verify run on a ram device"
bench --device=ram,size=256M --rw=randrw --bs=4k --iodepth=16 --numjobs=2 --size=128M \
  --runtime=10 --time_based --verify=crc32c --control="$sock" >"$tmp/switch.json" &
pids+=($!)
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
sleep 0.5
scheds=(mq-deadline kyber bfq none)
switched=0
for i in $(seq 0 99); do
  "$mqblk" qos --control="$sock" scheduler "${scheds[i % 4]}" >/dev/null
  switched=$((switched + 1))
  sleep 0.03
done
echo "  $switched switches sent"
wait "${pids[-1]}"
field "$tmp/switch.json" "'100 switches: %d I/Os, verify errors %s' % (sum(x['read']['total_ios'] + x['write']['total_ios'] for x in j['jobs']), [x.get('verify_errors') for x in j['jobs']])"
fi

echo
if only 7; then
echo "== 7. bad input"
for spec in "null,scheduler=cfq" "null,riops=-5"; do
  "$mqblk" bench --device="$spec" --runtime=1 2>&1 | sed 's/^/  /' | head -1 || true
done
"$mqblk" bench --device=null --cgroup=a --cgroup_weight=0 --runtime=1 2>&1 | sed 's/^/  /' | head -1 || true
fi
