#!/usr/bin/env bash
# Fetch the Debian source of the installed fio into DIR and print the path
# of its tree: contrib/fio-engine/fetch-fio-source.sh DIR
#
# Adds a deb-src entry for the system's Debian suites if apt has none
# (that needs root). Reuses a tree already fetched into DIR.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
version=$(dpkg-query -W -f='${Version}' fio 2>/dev/null) || {
  echo "fio is not installed (apt-get install fio)" >&2
  exit 1
}
upstream=${version%%-*}
upstream=${upstream#*:}
if [ -f "$dir/fio-$upstream/fio.h" ]; then
  echo "$dir/fio-$upstream"
  exit 0
fi
if ! apt-get source --print-uris fio >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || { echo "apt has no deb-src entry; run as root to add one" >&2; exit 1; }
  # shellcheck disable=SC1091
  . /etc/os-release
  cat >/etc/apt/sources.list.d/mqblk-deb-src.sources <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $VERSION_CODENAME $VERSION_CODENAME-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq >&2
fi
command -v dpkg-source >/dev/null || {
  echo "dpkg-source is missing (apt-get install dpkg-dev)" >&2
  exit 1
}
(cd "$dir" && apt-get source -qq "fio=$version" >/dev/null 2>&1) || {
  echo "apt-get source fio=$version failed" >&2
  exit 1
}
[ -f "$dir/fio-$upstream/fio.h" ] || { echo "no fio-$upstream tree in $dir" >&2; exit 1; }
echo "$dir/fio-$upstream"
