#!/usr/bin/env bash
# Store results files gzipped: DIR/results.json -> DIR/results.json.gz
# (`gzip -9 -n`: no name or time in the header, so the same JSON always
# gives the same bytes). The tools read either form, and recorded
# file_sha256s are over the JSON text, so nothing that references a file
# changes. Each file is checked to decompress to its exact bytes before
# the plain one is removed. Idempotent: a directory without a plain
# results.json is skipped; one with both is refused (the audit calls it
# ambiguous).
# Usage: scripts/compress-results.sh [DIR...]
#   (default: every bench/results/* directory with a plain results.json)
set -euo pipefail
if [ $# -eq 0 ]; then
  cd "$(dirname "$0")/.."
  shopt -s nullglob
  set -- bench/results/*/
fi
status=0 count=0
for dir in "$@"; do
  dir=${dir%/}
  plain=$dir/results.json gz=$dir/results.json.gz
  [ -f "$plain" ] || continue
  if [ -e "$gz" ]; then
    echo "$dir: both results.json and results.json.gz; leaving it" >&2
    status=1
    continue
  fi
  tmp=$(mktemp "$dir/.results.json.gz.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  gzip -9 -n -c "$plain" > "$tmp"
  if ! gzip -dc "$tmp" | cmp -s - "$plain"; then
    echo "$dir: the gzipped copy does not decompress to results.json; leaving it" >&2
    rm -f "$tmp"
    status=1
    continue
  fi
  chmod --reference="$plain" "$tmp"
  before=$(stat -c %s "$plain")
  mv "$tmp" "$gz"
  trap - EXIT
  rm "$plain"
  echo "$gz: $before -> $(stat -c %s "$gz") bytes"
  count=$((count + 1))
done
echo "compressed $count file(s)"
exit $status
