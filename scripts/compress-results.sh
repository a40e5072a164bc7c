#!/usr/bin/env bash
# Store results files gzipped and captured kernel sources bundled:
# DIR/results.json -> DIR/results.json.gz (`gzip -9 -n`: no name or time in
# the header, so the same text always gives the same bytes), and
# DIR/sources/SHA.cu[.gz] -> one DIR/sources.json.gz (`lanefold
# bundle-sources`; a tar header and padding per small file cost more than
# the file, and the device tool's carry counts them). The tools read either form,
# and recorded file_sha256s and source_sha256s are over the plain text, so
# nothing that references a file changes. Each file is checked to
# decompress to its exact bytes before the plain one is removed.
# Idempotent: a file without a plain form is skipped; one with both forms
# is refused (the audit calls it ambiguous).
# Latency probes (DIR/*.json beside their .txt tables) are gzipped the
# same way.
# Usage: scripts/compress-results.sh [DIR...]
#   (default: every bench/results/* and bench/probes/* directory)
set -euo pipefail
shopt -s nullglob
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/target/release/lanefold}
if [ ! -x "$bin" ]; then
  echo "compress-results.sh: $bin not found; run cargo build --release first (or set BIN)" >&2
  exit 2
fi
if [ $# -eq 0 ]; then
  cd "$root"
  set -- bench/results/*/ bench/probes/*/
fi
status=0 count=0 tmp=
trap 'rm -f "$tmp"' EXIT

# compress PLAIN TMP: PLAIN -> PLAIN.gz through TMP (same directory, so the
# rename is atomic); on failure TMP is removed and PLAIN kept. Every step
# is checked explicitly: callers use `||`, which turns off `set -e` inside.
compress() {
  tmp=$2
  compress_via_tmp "$1" && return
  rm -f "$tmp"
  tmp=
  return 1
}
compress_via_tmp() {
  local plain=$1 gz=$1.gz
  if [ -e "$gz" ]; then
    echo "$plain: both ${plain##*/} and ${gz##*/}; leaving it" >&2
    return 1
  fi
  gzip -9 -n -c "$plain" > "$tmp" || return 1
  if ! gzip -dc "$tmp" | cmp -s - "$plain"; then
    echo "$plain: the gzipped copy does not decompress to it; leaving it" >&2
    return 1
  fi
  chmod --reference="$plain" "$tmp" && mv "$tmp" "$gz" || return 1
  tmp=
  rm "$plain"
}

for dir in "$@"; do
  dir=${dir%/}
  plain=$dir/results.json
  if [ -f "$plain" ]; then
    before=$(stat -c %s "$plain")
    if compress "$plain" "$(mktemp "$dir/.results.json.gz.XXXXXX")"; then
      echo "$plain.gz: $before -> $(stat -c %s "$plain.gz") bytes"
      count=$((count + 1))
    else
      status=1
    fi
  fi
  # A probe's raw samples, one JSON file per probed case.
  for plain in "$dir"/*.json; do
    [ "${plain##*/}" = results.json ] && continue
    [ -f "${plain%.json}.txt" ] || continue
    before=$(stat -c %s "$plain")
    if compress "$plain" "$(mktemp "$dir/.probe.json.gz.XXXXXX")"; then
      echo "$plain.gz: $before -> $(stat -c %s "$plain.gz") bytes"
      count=$((count + 1))
    else
      status=1
    fi
  done
  # Captured sources: one bundle per directory (`lanefold bundle-sources`:
  # each text read back before its file is removed).
  [ -d "$dir/sources" ] || continue
  if out=$("$bin" bundle-sources "$dir"); then
    # Empty: nothing was left to bundle, no file written.
    [ -z "$out" ] || { echo "$out"; count=$((count + 1)); }
  else
    status=1
  fi
done
echo "compressed $count file(s)"
exit $status
