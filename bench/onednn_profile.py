#!/usr/bin/env python3
"""Sums ONEDNN_VERBOSE execution lines by primitive, implementation, propagation and data
types: where a oneDNN run spends its time, and which implementations oneDNN picked.

usage: ONEDNN_VERBOSE=1 mosaic bench ... 2>&1 | bench/onednn_profile.py [--top 20]
"""
import argparse
import collections
import re
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    ms, calls = collections.defaultdict(float), collections.Counter()
    for line in sys.stdin:
        if not line.startswith("onednn_verbose,exec,"):
            continue
        f = line.rstrip("\n").split(",")
        # exec,cpu,PRIMITIVE,IMPLEMENTATION,PROPAGATION,TENSORS,...,TIME_MS
        tensors = " ".join(re.sub(r":f\d+$", "", t).replace("::", ":").replace("blocked:", "") for t in f[6].split())
        key = f"{f[3]:<14} {f[4]:<28} {f[5]:<17} {tensors}"
        ms[key] += float(f[-1])
        calls[key] += 1
    total = sum(ms.values())
    print(f"{total:.1f} ms in {sum(calls.values())} primitive calls")
    for key, t in sorted(ms.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"{t:9.2f} ms {100 * t / max(total, 1e-9):5.1f}% {calls[key]:5d}  {key}")


if __name__ == "__main__":
    main()
