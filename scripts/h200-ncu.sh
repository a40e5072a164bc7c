#!/usr/bin/env bash
# Hardware counters of one kernel launch (Nsight Compute, clocks left alone
# as the device's METHOD.md asks), so a claim about what limits a kernel
# rests on counters, not only on timing differences.
# Usage: scripts/h200-ncu.sh OUT_DIR NAME KERNEL_REGEX COMMAND...  (the regex bare, no "regex:")
#   profiles the first launch whose name matches KERNEL_REGEX in COMMAND;
#   writes NAME.ncu-rep, NAME-details.txt (every section, human-readable)
#   and NAME-raw.csv (every metric) into OUT_DIR, and prints the headline
#   lines. ncu flushes the caches before each pass (L2 cold); the data of
#   the long rows is more than four times the L2, so that is the state the
#   warm benches see too. NCU_EXTRA adds options (e.g. "--cache-control none
#   --launch-skip 100" for a later launch with the L2 as the previous one
#   left it; "--nvtx --nvtx-include measure/" for python/ncu_peer.py).
set -uo pipefail
out=${1:?output dir}
name=${2:?name}
regex=${3:?kernel regex}
shift 3
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
if [ -z "$ncu" ]; then
  echo "ncu: not found on this machine" >&2
  exit 2
fi
mkdir -p "$out"
sections=(SpeedOfLight MemoryWorkloadAnalysis MemoryWorkloadAnalysis_Tables
  MemoryWorkloadAnalysis_Chart Occupancy LaunchStats WarpStateStats SchedulerStats)
args=(--clock-control none --kernel-name "regex:$regex" --launch-count 1 -f -o "$out/$name")
for s in "${sections[@]}"; do args+=(--section "$s"); done
# shellcheck disable=SC2206
args+=(${NCU_EXTRA:-})
"$ncu" "${args[@]}" "$@" > "$out/$name-ncu.log" 2>&1
rc=$?
if [ ! -f "$out/$name.ncu-rep" ]; then
  echo "ncu $name: no report (rc=$rc)"; tail -5 "$out/$name-ncu.log"
  exit 1
fi
"$ncu" --import "$out/$name.ncu-rep" --page details > "$out/$name-details.txt" 2>&1
"$ncu" --import "$out/$name.ncu-rep" --page raw --csv > "$out/$name-raw.csv" 2>&1
echo "-- ncu $name (rc=$rc)"
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|L2 Hit Rate|Mem Busy|Max Bandwidth|Mem Pipes Busy|Warp Cycles Per Issued|Issued Warp Per|No Eligible" \
  "$out/$name-details.txt" | sed 's/  */ /g' | head -24
grep -E "stall|Stall" "$out/$name-details.txt" | sed 's/  */ /g' | head -4
