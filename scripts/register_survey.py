#!/usr/bin/env python3
"""Registers per thread: the mapper's estimate against what NVRTC 13.0 and
ptxas give, for every measured candidate of the committed H200 searches.
No GPU needed: NVRTC comes from scripts/fetch-nvrtc.sh. Prints a summary
per operator, dtype and residency, and how often the estimate puts a plan
at a different number of groups per multiprocessor than the compiler does.
Usage: scripts/register_survey.py [BINARY]   (default target/release/lanefold)"""
import collections
import os
import re
import statistics
import subprocess
import sys

from target4_grid import cluster_group_threads, results_files


def main(binary):
    lib = subprocess.check_output(["bash", "scripts/fetch-nvrtc.sh"]).decode().strip()
    env = dict(os.environ, LD_LIBRARY_PATH=lib)
    rows, seen = [], set()
    for _, doc in results_files("bench/results/*search*"):
        for p in doc["problems"]:
            for c in p["candidates"]:
                if c.get("objective_p50") is None or not c.get("plan"):
                    continue
                layout, describe = c["plan"]["layout"], c["plan"]["describe"]
                key = (p["op"], p["dtype"], p["shape"], describe)
                if key in seen:
                    continue
                seen.add(key)
                cgt = cluster_group_threads(describe)
                args = [binary, "compile-check", "--ops", p["op"], "--shapes", p["shape"],
                        "--dtypes", p["dtype"], "--workers", str(layout["workers"]),
                        "--pack", str(layout["pack"]), "--unroll", str(layout["unroll"]),
                        "--rows-per-group", str(layout["rows_per_group"]),
                        "--residency", "stream" if c["plan"]["residency"] == "stream" else "registers",
                        "--cluster-group-threads", cgt]
                out = subprocess.run(args, env=env, capture_output=True, text=True).stdout
                line = next((l for l in out.splitlines() if l.startswith("│ " + p["op"] + " ")), None)
                if line is None:
                    sys.exit(f"{key}: compile-check gave no row:\n{out[-500:]}")
                cells = [x.strip() for x in line.strip("│").split("┆")]
                if cells[3] != describe:
                    sys.exit(f"{key}: planned again as {cells[3]}")
                actual, estimate = map(int, re.match(r"(\d+) \((\d+)\)", cells[5]).groups())
                group_threads = int(cgt) if "cluster=" in describe else max(
                    32, layout["workers"] * layout["rows_per_group"])
                rows.append((p["op"], p["dtype"], c["plan"]["residency"], actual, estimate,
                             group_threads, cells[6]))

    def per_sm(regs, threads):
        return max(1, min(2048 // threads, 65536 // (regs * threads)))

    groups = collections.defaultdict(list)
    differ = 0
    for op, dtype, residency, actual, estimate, threads, _ in rows:
        groups[(op, dtype, residency)].append(actual - estimate)
        differ += per_sm(actual, threads) != per_sm(estimate, threads)
    spills = sum(1 for r in rows if r[6] != "0/0")
    print(f"{len(rows)} measured candidates; groups per SM differ between estimate and "
          f"compiler in {differ}; {spills} spill")
    print("op dtype residency: n, actual - estimate mean [min, max]")
    for (op, dtype, residency), d in sorted(groups.items()):
        print(f"{op} {dtype} {residency}: {len(d)}, {statistics.mean(d):+.1f} [{min(d)}, {max(d)}]")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/release/lanefold")
