#!/usr/bin/env bash
# Prints mqblk-core's module graph (each module and the modules it uses,
# from `use crate::…` lines, comments aside) and its strongly connected
# components: the only cycle allowed is the bottom (bio, error, limits).
# Exits 1 if any other module is on a cycle.
set -euo pipefail
cd "$(dirname "$0")/../crates/mqblk-core/src"
# A module is a file (queue.rs) or a directory with its submodules
# (sched/mod.rs, sched/kyber.rs, ...), which count as one.
for f in *.rs */; do
  m=${f%.rs}
  m=${m%/}
  files=("$f")
  [ -d "$f" ] && files=("$f"*.rs)
  deps=$(cat "${files[@]}" | grep -v '^\s*//' | grep -oE 'crate::[a-z_]+' | sed 's/crate:://' | sort -u | grep -vx "$m" | tr '\n' ' ' || true)
  echo "$m: $deps"
done | python3 -c '
import sys
g = {}
for line in sys.stdin:
    print(line, end="")
    m, d = line.split(":")
    g[m.strip()] = d.split()
index, low, stack, on, out = {}, {}, [], set(), []
def visit(v, n=[0]):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in g.get(v, []):
        if w not in g: continue
        if w not in index: visit(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        c = []
        while True:
            w = stack.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: out.append(sorted(c))
for v in list(g):
    if v not in index: visit(v)
print("cycles:", out or "none")
bad = [c for c in out if not set(c) <= {"bio", "buf", "error", "limits"}]
sys.exit(1 if bad else 0)
'
