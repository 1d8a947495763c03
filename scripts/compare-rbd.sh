#!/usr/bin/env bash
# The rbd driver against its peers, in one run, on a throwaway cluster
# (scripts/micro-ceph), on one 1 GiB image filled first:
#
#   1. mqblk bench --device rbd:rbd/img   vs   fio --ioengine=rbd, 4k
#      randread and randwrite at QD32, 1 job, in both librbd cache modes;
#      IOPS and each client process's whole CPU time per I/O (wait4's
#      rusage: every thread, librbd's included, start-up included for
#      both; fio's own usr/sys counts only its job thread). Then QD1
#      latency percentiles (clat p50/p99/p99.9).
#   2. rbd bench --io-size 4K --io-threads 32 --io-pattern rand beside them.
#   3. Handles: one shared image handle against one per hardware queue
#      (2 jobs, 2 hardware queues).
#   4. A 30 s crc32c verify run: randrw with 10% of the writes discards,
#      10% write-zeroes, and a flush every 64 writes; 0 mismatches expected.
#   5. The OSD killed mid-run (io_timeout_ms=5000): when the bench's I/O
#      fails, how the process ends, and a run after the OSD is back.
#
#   6. With PAIRS=N: acceptance 1 again as N alternating pairs per cell
#      (mqblk then fio, fio then mqblk, ...), with each pair's IOPS and
#      CPU-per-I/O ratios and their medians: one run each swings by about
#      10% on a shared 2-CPU machine.
#
# Usage: [PAIRS=N] scripts/compare-rbd.sh [RUNTIME_SECONDS]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
for t in fio rbd ceph-mon ceph-osd python3; do
  command -v "$t" >/dev/null || PATH=$PATH:/usr/sbin command -v "$t" >/dev/null || {
    echo "compare-rbd: $t is missing (apt-get install fio ceph-mon ceph-osd ceph-common)" >&2
    exit 1
  }
done
cargo build --release -q -p mqblk-cli
mqblk=${CARGO_TARGET_DIR:-target}/release/mqblk
dir=$(mktemp -d)
cleanup() { scripts/micro-ceph stop "$dir" || true; rm -rf "$dir"; }
trap cleanup EXIT
conf=$(scripts/micro-ceph start "$dir" 2>/dev/null)
rbd -c "$conf" create --size 1G rbd/img
rbd -c "$conf" bench --io-type write --io-size 4M --io-threads 8 --io-pattern seq \
  --io-total 1G rbd/img >/dev/null

# One config per cache mode, read by all three clients.
for c in on off; do
  cp "$conf" "$dir/client-$c.conf"
  v=true; [ $c = off ] && v=false
  printf '\n[client]\nrbd cache = %s\nerr to stderr = false\n' "$v" >>"$dir/client-$c.conf"
done

# Run a command; print its whole CPU time in seconds (all threads) on fd 3.
cpu_of() {
  python3 - "$@" <<'PY'
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=open(os.environ["OUT"], "w"),
                     stderr=subprocess.DEVNULL)
_, status, ru = os.wait4(p.pid, 0)
print(f"{ru.ru_utime + ru.ru_stime:.3f}")
sys.exit(os.waitstatus_to_exitcode(status))
PY
}

# name json cpu_s rw
report() {
  python3 - "$@" <<'PY'
import json, sys
name, path, cpu, rw = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
jobs = [j["read" if "read" in rw else "write"] for j in json.load(open(path))["jobs"]]
j = jobs[0]
ios, p = sum(x["total_ios"] for x in jobs), j["clat_ns"]["percentile"]
iops = sum(x["iops"] for x in jobs)
print(f"  {name:18s} IOPS={iops:>8.0f}  ios={ios:>7d}  cpu={cpu:6.2f}s"
      f"  cpu_ns_per_io={cpu * 1e9 / max(ios, 1):7.0f}"
      f"  clat p50={p['50.000000'] / 1000:7.1f}us p99={p['99.000000'] / 1000:7.1f}us"
      f" p99.9={p['99.900000'] / 1000:7.1f}us")
PY
}

mq() { # conf rw iodepth runtime json [extra spec]
  OUT=$5 cpu_of "$mqblk" bench --device "rbd:rbd/img,conf=$1${6:-}" --rw="$2" --bs=4k \
    --iodepth="$3" --runtime="$4" --time_based --output-format=json
}
fi_() { # conf rw iodepth runtime json
  CEPH_CONF=$1 OUT=$5 cpu_of fio --name=job --ioengine=rbd --pool=rbd --rbdname=img \
    --clientname=admin --rw="$2" --bs=4k --iodepth="$3" --runtime="$4" --time_based \
    --output-format=json
}

echo "== rbd, 4k, 1 job, ${runtime}s per run, $(nproc) CPUs, $(uptime | sed 's/.*load/load/')"
for c in on off; do
  cf=$dir/client-$c.conf
  echo "-- rbd_cache=$c"
  for rw in randread randwrite; do
    echo " $rw QD32"
    cpu=$(mq "$cf" $rw 32 "$runtime" "$dir/m.json"); report "mqblk" "$dir/m.json" "$cpu" $rw
    cpu=$(fi_ "$cf" $rw 32 "$runtime" "$dir/f.json"); report "fio rbd engine" "$dir/f.json" "$cpu" $rw
    io=read; [ $rw = randwrite ] && io=write
    out=$dir/rbdbench.txt
    cpu=$(OUT=$out cpu_of rbd -c "$cf" bench --io-type $io --io-size 4K --io-threads 32 \
      --io-pattern rand --io-total 256M rbd/img)
    ops=$(sed -n 's/.*ops: *\([0-9]*\).*ops\/sec: *\([0-9.]*\).*/\1 \2/p' "$out" | tail -1)
    set -- $ops
    printf '  %-18s IOPS=%8.0f  ios=%7d  cpu=%6.2fs  cpu_ns_per_io=%7.0f\n' "rbd bench" "$2" "$1" \
      "$cpu" "$(python3 -c "print($cpu * 1e9 / max($1, 1))")"
    echo " $rw QD1"
    cpu=$(mq "$cf" $rw 1 5 "$dir/m.json"); report "mqblk" "$dir/m.json" "$cpu" $rw
    cpu=$(fi_ "$cf" $rw 1 5 "$dir/f.json"); report "fio rbd engine" "$dir/f.json" "$cpu" $rw
  done
done

echo "== image handles: 2 jobs on 2 hardware queues, QD32 each, rbd_cache=on"
for rw in randread randwrite; do
  for h in shared queue; do
    cpu=$(OUT=$dir/h.json cpu_of "$mqblk" bench --device "rbd:rbd/img,conf=$dir/client-on.conf,hw_queues=2,handles=$h" \
      --rw=$rw --bs=4k --iodepth=32 --numjobs=2 --runtime="$runtime" --time_based \
      --output-format=json 2>/dev/null || true)
    if [ -s "$dir/h.json" ]; then report "$rw handles=$h" "$dir/h.json" "$cpu" $rw; fi
  done
done

echo "== verify: 30 s randrw crc32c, QD16, rbd_cache=on, with discards, write-zeroes and flushes"
"$mqblk" bench --device "rbd:rbd/img,conf=$dir/client-on.conf" --rw=randrw --bs=4k --iodepth=16 \
  --runtime=30 --time_based --verify=crc32c --trim_percentage=10 --write_zeroes_percentage=10 \
  --fsync=64 --output-format=json >"$dir/v.json"
python3 - "$dir/v.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print(f"  verify_errors={j['verify_errors']} error={j['error']} verify={j['verify']}")
PY

echo "== OSD killed 5 s into a 20 s randrw QD32 run, io_timeout_ms=5000, rbd_cache=off"
start=$(date +%s.%N)
"$mqblk" bench --device "rbd:rbd/img,conf=$dir/client-off.conf,io_timeout_ms=5000" --rw=randrw \
  --bs=4k --iodepth=32 --runtime=20 --time_based --output-format=json >"$dir/k.json" 2>"$dir/k.err" &
bench=$!
sleep 5
kill_at=$(date +%s.%N)
scripts/micro-ceph kill-osd "$dir"
rc=0
wait $bench || rc=$?
end=$(date +%s.%N)
python3 - "$dir/k.json" "$start" "$kill_at" "$end" "$rc" <<'PY'
import json, sys
start, kill_at, end, rc = map(float, sys.argv[2:6])
try:
    j = json.load(open(sys.argv[1]))["jobs"][0]
    errs = j["read"].get("errors", 0) + j["write"].get("errors", 0)
    summary = f"error={j['error']} io_errors={errs} read_ios={j['read']['total_ios']} write_ios={j['write']['total_ios']}"
except Exception as e:
    summary = f"(no JSON: {e})"
print(f"  bench exit={int(rc)} after {end - start:.1f}s (OSD killed at {kill_at - start:.1f}s): {summary}")
PY
grep -v '^[0-9-]*T[0-9:.+]* ' "$dir/k.err" | head -5 | sed 's/^/  stderr: /'
scripts/micro-ceph start-osd "$dir" 2>/dev/null
"$mqblk" bench --device "rbd:rbd/img2,conf=$dir/client-off.conf,create=256M" --rw=randwrite --bs=4k \
  --iodepth=32 --runtime=3 --time_based --output-format=json >"$dir/r.json"
python3 - "$dir/r.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]["write"]
print(f"  after start-osd: a new image, randwrite IOPS={j['iops']:.0f} errors={j.get('errors', 0)}")
PY

pairs=${PAIRS:-0}
if [ "$pairs" -gt 0 ]; then
  echo "== acceptance 1 as $pairs alternating pairs per cell, QD32, ${runtime}s per run (mqblk/fio ratios)"
  # The OSD restart above emptied the cluster: the image again, filled.
  rbd -c "$conf" rm rbd/img >/dev/null 2>&1 || true
  rbd -c "$conf" create --size 1G rbd/img
  rbd -c "$conf" bench --io-type write --io-size 4M --io-threads 8 --io-pattern seq \
    --io-total 1G rbd/img >/dev/null
  # iops_cpu JSON CPU_SECONDS RW -> "iops cpu_ns_per_io"
  ic() {
    python3 - "$@" <<'PY'
import json, sys
path, cpu, rw = sys.argv[1], float(sys.argv[2]), sys.argv[3]
jobs = [j["read" if "read" in rw else "write"] for j in json.load(open(path))["jobs"]]
ios = sum(x["total_ios"] for x in jobs)
print(f"{sum(x['iops'] for x in jobs):.0f} {cpu * 1e9 / max(ios, 1):.0f}")
PY
  }
  for c in on off; do
    cf=$dir/client-$c.conf
    for rw in randread randwrite; do
      rows=()
      for i in $(seq "$pairs"); do
        if [ $((i % 2)) -eq 1 ]; then
          a=$(mq "$cf" $rw 32 "$runtime" "$dir/m.json"); a=$(ic "$dir/m.json" "$a" $rw)
          b=$(fi_ "$cf" $rw 32 "$runtime" "$dir/f.json"); b=$(ic "$dir/f.json" "$b" $rw)
        else
          b=$(fi_ "$cf" $rw 32 "$runtime" "$dir/f.json"); b=$(ic "$dir/f.json" "$b" $rw)
          a=$(mq "$cf" $rw 32 "$runtime" "$dir/m.json"); a=$(ic "$dir/m.json" "$a" $rw)
        fi
        rows+=("$a $b")
      done
      python3 - "rbd_cache=$c $rw" "${rows[@]}" <<'PY'
import statistics, sys
name, rows = sys.argv[1], [list(map(float, r.split())) for r in sys.argv[2:]]
iops = [m / f for m, _, f, _ in rows]
cpu = [mc / fc for _, mc, _, fc in rows]
for (m, mc, f, fc), r, c in zip(rows, iops, cpu):
    print(f"  {name:24s} mqblk {m:7.0f} IOPS {mc:6.0f} ns/IO   fio {f:7.0f} IOPS {fc:6.0f} ns/IO"
          f"   IOPS {r:.2f}x  CPU/IO {c:.2f}x")
print(f"  {name:24s} median: IOPS {statistics.median(iops):.2f}x  CPU/IO {statistics.median(cpu):.2f}x")
PY
    done
  done
fi
