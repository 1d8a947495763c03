#!/usr/bin/env bash
# The C API and the fio engine against the layer, in one run (issue 27):
#  1. alternating pairs on null,size=1G, randread 4k QD32: examples/c/qd32.c
#     (32 x mqblk_queue_read, then mqblk_queue_do_io until all are back)
#     against `mqblk bench`, and fio's null engine against fio with the
#     mqblk engine; each pair's ratio and the median;
#  2. instructions per I/O (valgrind --tool=callgrind, the difference of two
#     runs of different lengths, so that setup cancels out): the layer alone
#     (examples/smoke), mqblk bench, the C loop, fio's null engine and fio
#     with the mqblk engine; the engine's extra over fio's null engine
#     against the layer's own.
# Usage: scripts/compare-c.sh [PAIRS] [SECONDS]     (default 3 pairs of 1 s)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
secs=${2:-1}
for t in fio valgrind cargo-cinstall pkg-config cc; do
  command -v "$t" >/dev/null || { echo "$t is needed" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build --release -q -p mqblk-cli --bin mqblk
cargo build --release -q -p mqblk --example smoke
cargo cinstall --release -p mqblk-capi --prefix="$work/prefix" --libdir="$work/prefix/lib" >/dev/null
export PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig LD_LIBRARY_PATH=$work/prefix/lib
# shellcheck disable=SC2046
cc -std=c11 -O2 -g $(pkg-config --cflags mqblk) examples/c/qd32.c -o "$work/qd32" $(pkg-config --libs mqblk)
engine=$(contrib/fio-engine/build.sh "$work/fio-engine" | tail -1)
mqblk=target/release/mqblk
spec=null,size=1G
# fio's random map ends a sized job once every block is read: fio's runs
# take 64 GiB, so that 300,000 I/Os fit (as they do in mqblk's runs).
fspec=null,size=64G

bench_iops() {
  "$mqblk" bench --device "$spec" --rw=randread --bs=4k --iodepth=32 --output-format=json "$@" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["read"]["iops"])'
}
fio_iops() {
  fio --name=q --rw=randread --bs=4k --iodepth=32 --thread --output-format=json "$@" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["read"]["iops"])'
}
c_iops() { "$work/qd32" "$spec" "$1" | sed -n 's/.*: \([0-9]*\) IOPS.*/\1/p'; }
median() { python3 -c 'import sys; v=sorted(map(float, sys.argv[1:])); print("%.3f" % v[len(v)//2])' "$@"; }

echo "== 1. alternating pairs, ${secs}s each"
c_ratios=() e_ratios=()
for i in $(seq "$pairs"); do
  c=$(c_iops "$secs")
  b=$(bench_iops --runtime="${secs}s" --time_based)
  r=$(python3 -c "print('%.3f' % ($c / $b))")
  c_ratios+=("$r")
  printf "pair %d: C loop %12.0f  mqblk bench %12.0f  C/bench %s\n" "$i" "$c" "$b" "$r"
done
for i in $(seq "$pairs"); do
  n=$(fio_iops --ioengine=null --size=64g --runtime="${secs}s" --time_based)
  e=$(fio_iops --ioengine="external:$engine" --mqblk_spec="$fspec" --filename=x --size=64g \
    --runtime="${secs}s" --time_based)
  r=$(python3 -c "print('%.3f' % ($e / $n))")
  e_ratios+=("$r")
  printf "pair %d: fio null %12.0f  fio+mqblk %12.0f  engine/null %s\n" "$i" "$n" "$e" "$r"
done
echo "median C/bench: $(median "${c_ratios[@]}")   median engine/null: $(median "${e_ratios[@]}")"

echo "== 2. instructions per I/O (callgrind; runs of 100k and 300k I/Os)"
ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null \
  | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'; }
per_io() { python3 -c "print('%.0f' % (($2 - $1) / 200000))"; }
smoke=$(per_io "$(ir target/release/examples/smoke 100000)" "$(ir target/release/examples/smoke 300000)")
# The bench's supervisor thread polls on a clock: only its job thread,
# whose I/O count is fixed, is counted.
job() { ir --toggle-collect='mqblk::bench::engine::job_thread*' "$mqblk" bench --device "$spec" \
  --rw=randread --iodepth=32 --number_ios="$1"; }
bench=$(per_io "$(job 100000)" "$(job 300000)")
fio_null=$(per_io "$(ir fio --name=q --ioengine=null --size=64g --rw=randread --iodepth=32 --thread --number_ios=100000)" \
  "$(ir fio --name=q --ioengine=null --size=64g --rw=randread --iodepth=32 --thread --number_ios=300000)")
fio_mq=$(per_io "$(ir fio --name=q --ioengine="external:$engine" --mqblk_spec="$fspec" --filename=x --size=64g \
    --rw=randread --iodepth=32 --thread --number_ios=100000)" \
  "$(ir fio --name=q --ioengine="external:$engine" --mqblk_spec="$fspec" --filename=x --size=64g \
    --rw=randread --iodepth=32 --thread --number_ios=300000)")
echo "layer alone (examples/smoke): $smoke"
echo "mqblk bench:                  $bench"
echo "fio null engine:              $fio_null"
echo "fio with the mqblk engine:    $fio_mq"
python3 -c "e=$fio_mq-$fio_null; print('engine over fio null: %d = %.2fx the layer' % (e, e/$smoke))"
# The C loop is time based: its own count of reads divides.
c_run() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$work/qd32" "$spec" "$1" 2>&1 \
    | python3 -c 'import re,sys; t=sys.stdin.read(); print(re.search(r"Collected : (\d+)", t)[1], re.search(r"qd32: [^:]*: (\d+) reads", t)[1])'
}
read -r i1 n1 <<<"$(c_run 1)"
read -r i2 n2 <<<"$(c_run 3)"
c_loop=$(python3 -c "print('%.0f' % (($i2 - $i1) / ($n2 - $n1)))")
echo "C loop (examples/c/qd32.c):   $c_loop   ($(python3 -c "print('%.2f' % ($c_loop / $bench))")x mqblk bench)"
