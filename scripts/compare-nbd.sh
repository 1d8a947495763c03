#!/usr/bin/env bash
# NBD acceptance figures, each measured once, side by side in one run:
#
#  1. fio's nbd engine (libnbd) against a 1 GiB ram export:
#       mqblk serve --device=ram,size=1G   vs   nbdkit memory 1G
#     4k randread and randwrite at iodepth 32, with 1 job and with 4 jobs
#     (each job its own connection), unix sockets. Both exports are filled
#     first. Printed: IOPS, the ratio mqblk/nbdkit, and each server's CPU
#     time per I/O (utime+stime of the server process from /proc/PID/stat).
#     mqblk runs twice: with its default of one I/O thread per core, and
#     with --io-threads=4 (one per fio job).
#  2. mqblk's own client against mqblk's server: mqblk bench, 2 jobs on an
#     nbd device with conns=2, 4k randread iodepth 32, against a null
#     export, a fresh ram export and the filled ram export of section 1:
#     IOPS, the client's CPU per I/O (bench's ns_per_io_cpu, and the whole
#     bench process's from getrusage) and the server's.
#  3. Real clients: nbdinfo --map on a sparse export; nbdcopy of a 1 GiB
#     image with holes in and out, compared, and qemu-img map of the copy;
#     qemu-img convert and qemu-io over TLS and over plaintext (one server
#     with --tls=on), timed.
#  4. 1,000 connections, each doing one 4k read per second for 10 s: all
#     replies checked; the server's CPU and RSS (idle, with 1,000 idle
#     connections, at the end), and the memory per idle connection.
#
# Each fio configuration runs mqblk, nbdkit, nbdkit, mqblk (two pairs in
# alternating order), so load from elsewhere on a shared machine shows up
# as a difference between the pairs rather than as a bias.
#
# Usage: scripts/compare-nbd.sh [RUNTIME_SECONDS] [SECTIONS]
#   (defaults: 10 seconds per run, sections 1234)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-10}
sections=${2:-1234}
for t in fio nbdkit nbdinfo nbdcopy qemu-img qemu-io openssl python3; do
  command -v "$t" >/dev/null || { echo "compare-nbd: $t is missing" >&2; exit 1; }
done
cargo build --release -q -p mqblk-cli
mqblk=${CARGO_TARGET_DIR:-target}/release/mqblk
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

wait_sock() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "no socket $1" >&2; exit 1; }
clk=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

"$mqblk" serve --device=ram,size=1G --socket "$dir/mqblk.sock" 2>"$dir/mqblk.log" &
mqblk_pid=$!; pids+=($mqblk_pid)
"$mqblk" serve --device=ram,size=1G --socket "$dir/mqblk4.sock" --io-threads=4 2>"$dir/mqblk4.log" &
mqblk4_pid=$!; pids+=($mqblk4_pid)
nbdkit -f -U "$dir/nbdkit.sock" memory 1G &
nbdkit_pid=$!; pids+=($nbdkit_pid)
wait_sock "$dir/mqblk.sock"; wait_sock "$dir/mqblk4.sock"; wait_sock "$dir/nbdkit.sock"

if [[ $sections == *1* ]]; then
echo "== 1. fio nbd engine, 4k, iodepth=32, ${runtime}s per run, unix sockets, $(nproc) CPUs"
fio_run() { # name pid uri rw jobs -> prints "iops ns_per_io"
  local name=$1 pid=$2 uri=$3 rw=$4 jobs=$5
  local t0; t0=$(cpu_ticks "$pid")
  fio --name="$name" --ioengine=nbd --uri="$uri" --rw="$rw" --bs=4k --iodepth=32 \
      --numjobs="$jobs" --group_reporting --runtime="$runtime" --time_based --size=1G \
      --output-format=json --output="$dir/$name.json" >/dev/null
  local t1; t1=$(cpu_ticks "$pid")
  python3 - "$dir/$name.json" "$rw" "$((t1 - t0))" "$clk" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
d = j["read"] if sys.argv[2] == "randread" else j["write"]
ticks, clk = int(sys.argv[3]), int(sys.argv[4])
ios = max(d["total_ios"], 1)
print(f"{d['iops']:.0f} {ticks * 1e9 / clk / ios:.0f}")
PY
}
for uri_pid in "nbd+unix:///?socket=$dir/mqblk.sock" "nbd+unix:///?socket=$dir/mqblk4.sock" \
    "nbd+unix:///?socket=$dir/nbdkit.sock"; do
  fio --name=fill --ioengine=nbd --uri="$uri_pid" --rw=write --bs=1M --iodepth=8 --size=1G \
      --output-format=terse >/dev/null
done
printf "%-10s %4s %5s %11s %11s %11s %7s %7s %10s %10s %10s\n" rw jobs pair mqblk_iops mqblk4_iops nbdkit_iops ratio ratio4 mqblk_ns mqblk4_ns nbdkit_ns
for rw in randread randwrite; do
  for jobs in 1 4; do
    m="nbd+unix:///?socket=$dir/mqblk.sock"; m4="nbd+unix:///?socket=$dir/mqblk4.sock"
    k="nbd+unix:///?socket=$dir/nbdkit.sock"
    read -r m1_iops m1_ns < <(fio_run "m1-$rw-$jobs" "$mqblk_pid" "$m" "$rw" "$jobs")
    read -r q1_iops q1_ns < <(fio_run "q1-$rw-$jobs" "$mqblk4_pid" "$m4" "$rw" "$jobs")
    read -r k1_iops k1_ns < <(fio_run "k1-$rw-$jobs" "$nbdkit_pid" "$k" "$rw" "$jobs")
    read -r k2_iops k2_ns < <(fio_run "k2-$rw-$jobs" "$nbdkit_pid" "$k" "$rw" "$jobs")
    read -r q2_iops q2_ns < <(fio_run "q2-$rw-$jobs" "$mqblk4_pid" "$m4" "$rw" "$jobs")
    read -r m2_iops m2_ns < <(fio_run "m2-$rw-$jobs" "$mqblk_pid" "$m" "$rw" "$jobs")
    for pair in 1 2; do
      eval "mi=\$m${pair}_iops qi=\$q${pair}_iops ki=\$k${pair}_iops mn=\$m${pair}_ns qn=\$q${pair}_ns kn=\$k${pair}_ns"
      printf "%-10s %4s %5s %11s %11s %11s %7s %7s %10s %10s %10s\n" "$rw" "$jobs" "$pair" "$mi" "$qi" "$ki" \
        "$(python3 -c "print(f'{$mi/$ki:.2f}x')")" "$(python3 -c "print(f'{$qi/$ki:.2f}x')")" "$mn" "$qn" "$kn"
    done
  done
done
fi
kill "$nbdkit_pid" "$mqblk4_pid"; wait "$nbdkit_pid" "$mqblk4_pid" 2>/dev/null || true

if [[ $sections == *2* ]]; then
echo
echo "== 2. mqblk bench (nbd client driver, conns=2, 2 jobs) against mqblk serve, 4k randread iodepth=32"
# Three exports: the null device (the NBD path alone), a fresh ram device
# (reads of holes), and the 1 GiB ram export that section 1 filled (filled
# here if section 1 did not run): its reads copy scattered pages.
"$mqblk" serve --device=null,size=1G --socket "$dir/null.sock" 2>"$dir/null.log" &
null_pid=$!; pids+=($null_pid)
"$mqblk" serve --device=ram,size=1G --socket "$dir/fresh.sock" 2>"$dir/fresh.log" &
fresh_pid=$!; pids+=($fresh_pid)
wait_sock "$dir/null.sock"; wait_sock "$dir/fresh.sock"
if [[ $sections != *1* ]]; then
  "$mqblk" bench --device "nbd+unix:///?socket=$dir/mqblk.sock" --rw=write --bs=1m --iodepth=8 \
    --size=1G >/dev/null
fi
bench2() { # name pid socket
  local t0 t1
  t0=$(cpu_ticks "$2")
  python3 - "$dir/bench.json" "$mqblk" bench --device "nbd+unix:///?socket=$3,conns=2" \
    --rw=randread --bs=4k --iodepth=32 --numjobs=2 --size=1G --runtime="$runtime" --time_based \
    --output-format=json <<'PY'
import resource, subprocess, sys
with open(sys.argv[1], "w") as f:
    subprocess.run(sys.argv[2:], stdout=f, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1] + ".cpu", "w").write(str(r.ru_utime + r.ru_stime))
PY
  t1=$(cpu_ticks "$2")
  python3 - "$dir/bench.json" "$((t1 - t0))" "$clk" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
cpu = float(open(sys.argv[1] + ".cpu").read())
iops = sum(x["read"]["iops"] for x in j["jobs"])
ios = sum(x["read"]["total_ios"] for x in j["jobs"])
ticks, clk = int(sys.argv[2]), int(sys.argv[3])
m = j.get("mqblk", {})
print(f"{sys.argv[4]:<12} client IOPS={iops:.0f}  client_ns_per_io_cpu={m.get('ns_per_io_cpu', float('nan')):.0f}"
      f"  client_process_ns_per_io={cpu * 1e9 / max(ios, 1):.0f}"
      f"  allocs_per_io={m.get('allocs_per_io', float('nan'))}"
      f"  server_ns_per_io={ticks * 1e9 / clk / max(ios, 1):.0f}")
PY
}
bench2 "null" "$null_pid" "$dir/null.sock"
bench2 "ram fresh" "$fresh_pid" "$dir/fresh.sock"
bench2 "ram filled" "$mqblk_pid" "$dir/mqblk.sock"
kill "$null_pid" "$fresh_pid"; wait "$null_pid" "$fresh_pid" 2>/dev/null || true
fi
kill "$mqblk_pid"; wait "$mqblk_pid" 2>/dev/null || true

if [[ $sections == *3* ]]; then
echo
echo "== 3. real clients"
# A sparse export: three 1 MiB data ranges in 1 GiB.
"$mqblk" serve --device=ram,size=1G --socket "$dir/sparse.sock" 2>"$dir/sparse.log" &
pids+=($!); sparse_pid=$!
wait_sock "$dir/sparse.sock"
uri="nbd+unix:///?socket=$dir/sparse.sock"
truncate -s 1G "$dir/src.img"
for off in 0 300 900; do
  head -c 1M /dev/urandom | dd of="$dir/src.img" bs=1M seek="$off" conv=notrunc status=none
done
t=$(date +%s.%N); nbdcopy "$dir/src.img" "$uri"; t_in=$(python3 -c "print(f'{$(date +%s.%N)-$t:.2f}')")
echo "nbdinfo --map (sparse export after nbdcopy in):"
nbdinfo --map "$uri" | sed 's/^/  /'
t=$(date +%s.%N); nbdcopy "$uri" "$dir/back.img"; t_out=$(python3 -c "print(f'{$(date +%s.%N)-$t:.2f}')")
cmp "$dir/src.img" "$dir/back.img" && echo "nbdcopy 1 GiB in ${t_in}s, out ${t_out}s: identical"
echo "qemu-img map of the copy (data ranges; the rest are holes):"
qemu-img map --output=json "$dir/back.img" | python3 -c '
import json, sys
m = json.load(sys.stdin)
data = [e for e in m if e["data"]]
holes = sum(e["length"] for e in m if not e["data"])
for e in data: print("  data at %d MiB, %d MiB" % (e["start"] >> 20, e["length"] >> 20))
print(f"  {len(data)} data ranges, {holes>>20} MiB of holes")'
kill "$sparse_pid"; wait "$sparse_pid" 2>/dev/null || true

# TLS: a CA and a server certificate for localhost.
pki=$dir/pki; mkdir -p "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=mqblk test CA" \
  -keyout "$pki/ca-key.pem" -out "$pki/ca-cert.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
  -keyout "$pki/server-key.pem" -out "$pki/server.csr" 2>/dev/null
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n" >"$pki/ext.cnf"
openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca-cert.pem" -CAkey "$pki/ca-key.pem" \
  -CAcreateserial -days 2 -extfile "$pki/ext.cnf" -out "$pki/server-cert.pem" 2>/dev/null
"$mqblk" serve --device=ram,size=1G --listen 127.0.0.1:0 --tls=on \
  --tls-cert "$pki/server-cert.pem" --tls-key "$pki/server-key.pem" 2>"$dir/tls.log" &
pids+=($!); tls_pid=$!
for _ in $(seq 200); do grep -q "listening on" "$dir/tls.log" && break; sleep 0.05; done
port=$(sed -n 's/.*listening on nbd:\/\/[^:]*:\([0-9]*\).*/\1/p' "$dir/tls.log")
head -c 256M /dev/urandom >"$dir/data.img"
creds="tls-creds-x509,id=tls0,endpoint=client,dir=$pki"
for mode in plaintext tls; do
  opts="driver=nbd,server.type=inet,server.host=localhost,server.port=$port"
  obj=()
  if [ "$mode" = tls ]; then opts="$opts,tls-creds=tls0"; obj=(--object "$creds"); fi
  t=$(date +%s.%N)
  qemu-img convert -n -f raw "${obj[@]}" "$dir/data.img" --target-image-opts "$opts"
  t_conv=$(python3 -c "print(f'{$(date +%s.%N)-$t:.2f}')")
  qemu-img convert -O raw "${obj[@]}" --image-opts "$opts" "$dir/data-back.img"
  truncate -s 256M "$dir/data-back.img"
  cmp "$dir/data.img" "$dir/data-back.img"
  t=$(date +%s.%N)
  out=$(qemu-io "${obj[@]}" --image-opts "$opts" -c "write -P 0x5a 512M 64M" -c "read -P 0x5a 512M 64M")
  t_io=$(python3 -c "print(f'{$(date +%s.%N)-$t:.2f}')")
  echo "$out" | grep -q "read 67108864/67108864" || { echo "qemu-io $mode failed: $out"; exit 1; }
  echo "$mode: qemu-img convert 256 MiB in ${t_conv}s (read back identical); qemu-io write+read 64 MiB in ${t_io}s"
done
kill "$tls_pid"; wait "$tls_pid" 2>/dev/null || true
fi

if [[ $sections == *4* ]]; then
echo
echo "== 4. 1,000 connections, one 4k read per second each for 10 s"
ulimit -n 8192 2>/dev/null || true
"$mqblk" serve --device=ram,size=1G --socket "$dir/many.sock" 2>"$dir/many.log" &
pids+=($!); many_pid=$!
wait_sock "$dir/many.sock"
python3 - "$dir/many.sock" "$many_pid" "$clk" <<'PY'
import os, socket, struct, sys, time
path, pid, clk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
N, SECONDS = 1000, 10
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
def ticks():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])
def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise EOFError("server closed")
        b += c
    return b
def connect():
    s = socket.socket(socket.AF_UNIX); s.connect(path)
    recv_exact(s, 18)
    s.sendall(struct.pack(">I", 3))
    data = struct.pack(">I", 0) + struct.pack(">H", 0)          # name "", no info requests
    s.sendall(struct.pack(">QII", 0x49484156454F5054, 7, len(data)) + data)
    while True:
        _, _, typ, ln = struct.unpack(">QIII", recv_exact(s, 20)); recv_exact(s, ln)
        if typ == 1: return s
        if typ & 0x80000000: raise RuntimeError("GO refused")
rss0 = rss()
conns = [connect() for _ in range(N)]
time.sleep(0.5)
rss1 = rss(); t0 = ticks(); start = time.time(); done = 0
for sec in range(SECONDS):
    for i, s in enumerate(conns):
        s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, i, (i * 4096) % (1 << 30), 4096))
    for i, s in enumerate(conns):
        magic, err, cookie = struct.unpack(">IIQ", recv_exact(s, 16)); recv_exact(s, 4096)
        assert magic == 0x67446698 and err == 0 and cookie == i
        done += 1
    time.sleep(max(0, start + sec + 1 - time.time()))
t1 = ticks(); wall = time.time() - start; rss2 = rss()
cpu = (t1 - t0) / clk
print(f"{done} of {N * SECONDS} reads answered over {wall:.1f}s; server CPU {cpu:.2f}s = {100 * cpu / wall:.1f}% of a core")
print(f"server RSS: {rss0} KiB idle, {rss1} KiB with {N} idle connections, {rss2} KiB at the end; "
      f"{(rss1 - rss0) / N:.1f} KiB per idle connection, {(rss2 - rss0) / N:.1f} KiB per connection after I/O")
for s in conns: s.close()
PY
kill "$many_pid"; wait "$many_pid" 2>/dev/null || true
fi
