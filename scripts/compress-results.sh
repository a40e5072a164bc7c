#!/usr/bin/env bash
# Store results files and captured kernel sources gzipped:
# DIR/results.json -> DIR/results.json.gz, DIR/sources/SHA.cu ->
# DIR/sources/SHA.cu.gz (`gzip -9 -n`: no name or time in the header, so
# the same text always gives the same bytes). The tools read either form,
# and recorded file_sha256s and source_sha256s are over the plain text, so
# nothing that references a file changes. Each file is checked to
# decompress to its exact bytes before the plain one is removed.
# Idempotent: a file without a plain form is skipped; one with both forms
# is refused (the audit calls it ambiguous).
# Usage: scripts/compress-results.sh [DIR...]
#   (default: every bench/results/* directory)
set -euo pipefail
shopt -s nullglob
if [ $# -eq 0 ]; then
  cd "$(dirname "$0")/.."
  set -- bench/results/*/
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
  # Thousands of small files: one summary line per directory.
  cus=("$dir"/sources/*.cu)
  [ ${#cus[@]} -gt 0 ] || continue
  declare -A size=()
  while read -r s name; do size[$name]=$s; done < <(stat -c '%s %n' "${cus[@]}")
  before=0 done_here=()
  for cu in "${cus[@]}"; do
    # A temp name beside the file (a dot file, never matched above).
    if compress "$cu" "$dir/sources/.${cu##*/}.gz.tmp.$$"; then
      before=$((before + ${size[$cu]}))
      done_here+=("$cu.gz")
    else
      status=1
    fi
  done
  unset size
  [ ${#done_here[@]} -gt 0 ] || continue
  after=$(stat -c %s "${done_here[@]}" | awk '{s += $1} END {print s}')
  echo "$dir/sources: ${#done_here[@]} source(s), $before -> $after bytes"
  count=$((count + ${#done_here[@]}))
done
echo "compressed $count file(s)"
exit $status
