#!/usr/bin/env bash
# Writes the King James Bible as plain text (about 4.3 MB), the default corpus of the language
# model workload, to $1 (default /usr/local/share/geotrain/kjv.txt). The text comes from Debian's
# bible-kjv-text, whose data file is compressed in a custom format; the `bible` program of the
# bible-kjv package extracts it. The line width is pinned to 79 (the program's default when
# COLUMNS is unset) so the bytes do not depend on the terminal. Atomic: writes a temporary file
# in the target's directory, checks it, then renames it over the target.
set -euo pipefail

out="${1:-/usr/local/share/geotrain/kjv.txt}"
if ! command -v bible >/dev/null; then
  echo "kjv: the 'bible' program is missing: install bible-kjv (scripts/bootstrap.sh does)" >&2
  exit 1
fi

dir="$(dirname "$out")"
mkdir -p "$dir"
tmp="$(mktemp "$dir/.kjv.txt.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
bible -l79 "gen1:1-rev22:21" </dev/null >"$tmp"
size="$(stat -c %s "$tmp")"
if [ "$size" -lt 4000000 ] ||
  ! grep -q "In the beginning God created the heaven and the earth." "$tmp"; then
  echo "kjv: 'bible' wrote $size bytes, not the whole King James Bible" >&2
  exit 1
fi
chmod 0644 "$tmp"
mv -f "$tmp" "$out"
trap - EXIT
echo "kjv: wrote $out ($size bytes)"
