#!/usr/bin/env python3
"""Target 4 check list: for every problem on an issue-6 target shape that a
committed H200 search has a winner for, the best winner's layout (W V U and
cluster group threads) as one line `op dtype shape W V U T`. A search of
just that layout also measures today's automatic mapping (added by the
search), so `lanefold scorecard` on its output judges target 4 for today's
mapper. Data only: reads results.json files (or their gzipped copies,
results.json.gz), runs nothing."""
import glob
import gzip
import json
import os
import re
import sys

TARGET_SHAPES = {
    "32768x4096", "16384x8192", "4096x32768", "4096x131072", "1024x262144",
    "1x127", "17x257", "64x4096", "1024x4096", "1x4096", "8x4096", "32x4096",
}


def cluster_group_threads(describe):
    """The cluster group size a layout description names: its
    `group-threads=T`, else 512 (the H200's) for a cluster, else 0."""
    threads = re.search(r"group-threads=(\d+)", describe)
    if threads:
        return threads.group(1)
    return "512" if "cluster=" in describe else "0"


def results_files(dirs):
    """(path, parsed JSON) of DIR/results.json for each directory matching
    the glob `dirs`, in path order; where it is absent, the committed
    gzipped copy DIR/results.json.gz (plain wins, as in lanefold)."""
    for d in sorted(glob.glob(dirs), key=lambda d: os.path.join(d, "results.json")):
        path = os.path.join(d, "results.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                yield path, json.load(f)
        elif os.path.isfile(path + ".gz"):
            with gzip.open(path + ".gz", "rt", encoding="utf-8") as f:
                yield path + ".gz", json.load(f)


def main(root):
    best = {}
    for path, doc in results_files(os.path.join(root, "*search*")):
        if doc.get("schema") != "lanefold-search/1":
            continue
        for p in doc["problems"]:
            w = p.get("winner")
            if p["shape"] not in TARGET_SHAPES or not w or w.get("fresh_p50") is None:
                continue
            m = re.match(r"W=(\d+) V=(\d+) U=(\d+) G=\d+", w["describe"])
            if not m:
                sys.exit(f"{path}: {p['id']}: unreadable layout {w['describe']!r}")
            t = cluster_group_threads(w["describe"])
            key = (p["op"], p["dtype"], p["shape"])
            if key not in best or w["fresh_p50"] < best[key][0]:
                best[key] = (w["fresh_p50"], m.group(1), m.group(2), m.group(3), t)
    for (op, dtype, shape), (_, w, v, u, t) in sorted(best.items()):
        print(op, dtype, shape, w, v, u, t)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
