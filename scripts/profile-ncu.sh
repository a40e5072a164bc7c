#!/usr/bin/env bash
# Hardware counters of one kernel launch (Nsight Compute, clocks left
# alone), so a claim about what limits a kernel rests on counters, not
# only on timing differences. `lanefold counters OUT_DIR` tabulates the
# headline counters; `lanefold audit OUT_DIR` checks each details page
# against its raw page (bench/probes holds the committed ones).
#
# Usage: BIN=path/to/lanefold bash scripts/profile-ncu.sh OUT_DIR NAME KERNEL_REGEX COMMAND...
#   Profiles the first launch whose kernel name matches KERNEL_REGEX (bare,
#   no "regex:") in COMMAND, e.g.
#     bash scripts/profile-ncu.sh bench/probes/DATE-ncu-h200 ln-bf16 'layernorm' \
#       .device/lanefold bench --backend cuda --ops layernorm --dtypes bf16 \
#       --shapes 1024x262144 --samples 1 --sample-ms 1 --warmup-ms 1 --output /tmp/b
#   Writes NAME.ncu-rep, NAME-details.txt (every section, as ncu renders
#   it), NAME-raw.csv (every metric) and NAME-ncu.log into OUT_DIR and
#   prints the headline lines. ncu flushes the caches before each pass (L2
#   cold); NCU_EXTRA adds options (e.g. "--cache-control none
#   --launch-skip 100" for a later launch with the L2 as the one before
#   left it; "--nvtx --nvtx-include measure/" with python/ncu_peer.py).
#   Compress the report and raw page (gzip -9 -n) before committing.
#
# Device time: under a minute a profile (each launch is replayed once per
# section pass; bench/probes/2026-12-01-ncu-misses-h200's eight profiles
# and their commands took about 3 minutes).
set -euo pipefail
out=${1:?usage: profile-ncu.sh OUT_DIR NAME KERNEL_REGEX COMMAND...}
name=${2:?name}
regex=${3:?kernel regex}
shift 3
[ $# -gt 0 ] || { echo "profile-ncu.sh: no COMMAND to profile" >&2; exit 2; }
bin=${BIN:-target/release/lanefold}
# shellcheck disable=SC2012
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | tail -n 1 || true)
if [ -z "$ncu" ]; then
  echo "profile-ncu.sh: ncu not found on this machine" >&2
  exit 2
fi
mkdir -p "$out"
sections=(SpeedOfLight MemoryWorkloadAnalysis MemoryWorkloadAnalysis_Tables
  MemoryWorkloadAnalysis_Chart Occupancy LaunchStats WarpStateStats SchedulerStats)
args=(--clock-control none --kernel-name "regex:$regex" --launch-count 1 -f -o "$out/$name")
for s in "${sections[@]}"; do args+=(--section "$s"); done
# shellcheck disable=SC2206
args+=(${NCU_EXTRA:-})
rc=0
"$ncu" "${args[@]}" "$@" > "$out/$name-ncu.log" 2>&1 || rc=$?
if [ ! -f "$out/$name.ncu-rep" ]; then
  echo "ncu $name: no report (rc=$rc)"
  tail -n 5 "$out/$name-ncu.log"
  exit 1
fi
"$ncu" --import "$out/$name.ncu-rep" --page details > "$out/$name-details.txt" 2>&1
"$ncu" --import "$out/$name.ncu-rep" --page raw --csv > "$out/$name-raw.csv" 2>&1
echo "-- ncu $name (rc=$rc)"
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|L2 Hit Rate|Mem Busy|Max Bandwidth|Mem Pipes Busy|Warp Cycles Per Issued|Issued Warp Per|No Eligible" \
  "$out/$name-details.txt" | sed 's/  */ /g' | head -n 24 || true
grep -E "stall|Stall" "$out/$name-details.txt" | sed 's/  */ /g' | head -n 4 || true
if [ -x "$bin" ]; then
  "$bin" audit "$out"
else
  echo "(no lanefold binary at $bin: audit skipped; set BIN)"
fi
echo "profile in $out/$name.*"
