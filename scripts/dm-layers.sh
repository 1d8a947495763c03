#!/usr/bin/env bash
# What a stacked layer costs (issue: stacked devices, acceptance 4), side by
# side in one run with mqblk bench: 4k randread (and randwrite for the
# mirror) at iodepth 32, one job, on the null device (completion=inline,
# one hardware queue) and on layers over it:
#
#   linear         a one-line linear table: a remapped window of its leg
#                  (Device::remap, Linux's partition remap)
#   linear-rq      the same table through the request-based stacked
#                  driver (bio_remap=0)
#   striped        striped 2 8 over two null legs, bio-based (each bio
#                  mapped in the submitting context, clones sent to the
#                  legs' pipelines)
#   mirror         mirror core over two null legs (`nosync`: null legs are
#                  already the same, and a resync of them at open would
#                  run beside the measured I/O), bio-based
#   striped-rq, mirror-rq
#                  the same tables through the request-based stacked
#                  driver (bio_remap=0): a second pipeline on top
#
# Each configuration runs ROUNDS times, the configurations interleaved, and
# the median IOPS is printed with its ratio to the null device, and the
# median CPU per I/O (bench's ns_per_io_cpu) with the layer's share of it
# (the layer's minus the null device's), and allocations per I/O. With
# valgrind, the instructions per I/O of each (the smoke example, 200k I/Os
# after 100k of warm-up) follow: a figure the machine's load cannot move.
#
# Usage: scripts/dm-layers.sh [RUNTIME_SECONDS] [ROUNDS]   (defaults 2, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${1:-2}
rounds=${2:-5}
cargo build --release -q -p mqblk-cli
cargo build --release -q -p mqblk --example smoke
target=${CARGO_TARGET_DIR:-target}
mqblk=$target/release/mqblk
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
null="null,size=1G,completion=inline,hw_queues=1"
# A second leg must be another device: the same spec twice is one device.
null2="$null,queue_depth=64"
sectors=2097152
printf '0 %s linear %s 0\n' "$sectors" "$null" >"$dir/linear.table"
printf '0 %s striped 2 8 %s 0 %s 0\n' "$((2 * sectors))" "$null" "$null2" >"$dir/striped.table"
printf '0 %s mirror core 2 1024 nosync 2 %s 0 %s 0\n' "$sectors" "$null" "$null2" >"$dir/mirror.table"
declare -A spec=(
  [null]="$null"
  [linear]="dm-table:0 $sectors linear $null 0"
  [linear-rq]="dm:$dir/linear.table,bio_remap=0"
  [striped]="dm-table:0 $((2 * sectors)) striped 2 8 $null 0 $null2 0"
  [mirror]="dm-table:0 $sectors mirror core 2 1024 nosync 2 $null 0 $null2 0"
  [striped-rq]="dm:$dir/striped.table,bio_remap=0"
  [mirror-rq]="dm:$dir/mirror.table,bio_remap=0"
)
names=(null linear linear-rq striped striped-rq mirror mirror-rq)
# bench SPEC RW -> "IOPS:CPU_NS_PER_IO:ALLOCS_PER_IO"
iops() {
  "$mqblk" bench --device "$1" --rw "$2" --iodepth 32 --runtime "$runtime" \
    --time_based --output-format json 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); j=d["jobs"][0]; m=d["mqblk"]; print("%d:%.1f:%g" % (j["read"]["iops"]+j["write"]["iops"], m["ns_per_io_cpu"], m["allocs_per_io"]))'
}
median() { tr ' ' '\n' <<<"$1" | awk -F: -v f="$2" 'NF{print $f}' | sort -g | awk '{a[++n]=$1} END{print a[int((n+1)/2)]}'; }
for rw in randread randwrite; do
  declare -A got=()
  for _ in $(seq "$rounds"); do
    for n in "${names[@]}"; do
      [ "$rw" = randwrite ] && [[ "$n" = linear-rq || "$n" = striped* ]] && continue
      got[$n]="${got[$n]:-} $(iops "${spec[$n]}" "$rw")"
    done
  done
  echo "== $rw, median of $rounds runs, ${runtime}s each"
  base=$(median "${got[null]}" 1)
  base_cpu=$(median "${got[null]}" 2)
  for n in "${names[@]}"; do
    [ -n "${got[$n]:-}" ] || continue
    awk -v n="$n" -v m="$(median "${got[$n]}" 1)" -v c="$(median "${got[$n]}" 2)" \
      -v a="$(median "${got[$n]}" 3)" -v b="$base" -v bc="$base_cpu" \
      'BEGIN{printf "%-10s %10d IOPS  %.2fx null  CPU %6.1f ns/IO (layer %+6.1f)  allocs/IO %g\n", n, m, m/b, c, c-bc, a}'
  done
done
if command -v valgrind >/dev/null; then
  echo "== instructions per I/O (callgrind, smoke example, QD32 randread)"
  smoke=$target/release/examples/smoke
  count() {
    SMOKE_SPEC="$1" valgrind --tool=callgrind --callgrind-out-file="$dir/cg" "$smoke" "$2" >/dev/null 2>&1
    callgrind_annotate "$dir/cg" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}'
  }
  big="null,size=64G,hw_queues=1"
  declare -A cg=(
    [null]="$big"
    [linear]="dm-table:0 134217728 linear $big 0"
    [striped]="dm-table:0 268435456 striped 2 8 $big 0 $big,queue_depth=64 0"
    [mirror]="dm-table:0 134217728 mirror core 2 1024 nosync 2 $big 0 $big,queue_depth=64 0"
  )
  for n in null linear striped mirror; do
    a=$(count "${cg[$n]}" 100000)
    b=$(count "${cg[$n]}" 300000)
    echo "$n $(((b - a) / 200000)) instructions/IO"
  done
fi
