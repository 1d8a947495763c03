#!/usr/bin/env bash
# Build fio's external ioengine for mqblk: contrib/fio-engine/build.sh OUTDIR
#
# writes OUTDIR/libmqblk-fio.so, for `fio --ioengine=external:OUTDIR/libmqblk-fio.so`.
#
# fio's external engines compile against fio's own headers, of the same
# version as the fio binary that loads them. This fetches Debian's fio
# source with fetch-fio-source.sh (adding a deb-src entry for the system's
# Debian suites if apt has none; that needs root), configures it with `./configure --disable-native`
# and compiles engine.c with `-include config-host.h`. libmqblk must be
# installed where pkg-config finds it (`cargo cinstall` from
# crates/mqblk-capi; set PKG_CONFIG_PATH for a private prefix). The engine
# is linked with an rpath to libmqblk's libdir.
#
# FIO_SRC=DIR uses an already configured fio source tree instead.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)

src=${FIO_SRC:-}
if [ -z "$src" ]; then
  src=$("$here/fetch-fio-source.sh" "$out/fio-source")
fi
if [ ! -f "$src/config-host.h" ]; then
  (cd "$src" && ./configure --disable-native >"$out/fio-configure.log" 2>&1) || {
    cat "$out/fio-configure.log" >&2
    exit 1
  }
fi

libdir=$(pkg-config --variable=libdir mqblk)
# shellcheck disable=SC2046
cc -std=gnu11 -O2 -g -fPIC -shared -D_GNU_SOURCE -D_LARGEFILE_SOURCE -D_FILE_OFFSET_BITS=64 \
  -Wall -Wno-unused-parameter \
  -include "$src/config-host.h" -I"$src" \
  $(pkg-config --cflags mqblk) \
  "$here/engine.c" -o "$out/libmqblk-fio.so" \
  $(pkg-config --libs mqblk) -Wl,-rpath,"$libdir"
echo "$out/libmqblk-fio.so"
