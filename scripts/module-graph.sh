#!/usr/bin/env bash
# Prints the module graph of every crate under crates/ (each module file of
# a crate's src/ and the module files its code names) and its strongly
# connected components; exits 1 if any crate has a circle. The work is done
# by scripts/module_graph.py (its doc says what counts as an edge).
#
# Usage: scripts/module-graph.sh [CRATE...]   (default: every crate)
set -euo pipefail
exec python3 "$(dirname "$0")/module_graph.py" "$@"
