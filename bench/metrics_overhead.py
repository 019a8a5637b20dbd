#!/usr/bin/python3
"""Measures what Mosaic's metrics cost: `bench --metrics-overhead N` alternates N pairs of
iterations with metrics on (per-node events, per-stage CPU clocks) and off, in one run, and
reports median(on) / median(off) - 1 per backend. Each case runs --runs times (separate
processes); the table gives the median estimate and the range, because one estimate of a
sub-millisecond or bimodal iteration time can swing by several percent either way.
Prints the Markdown table of docs/metrics.md#overhead; cases range from the worst
(fmnist-cnn at batch 1: about 0.1 ms an iteration for 7 nodes) to typical ones.

usage: metrics_overhead.py MOSAIC [--pairs 200] [--runs 3]
"""
import argparse
import json
import os
import subprocess
import tempfile

CASES = [("zoo:fmnist-cnn", 1, "inference"), ("zoo:fmnist-cnn", 1, "training"), ("zoo:alexnet-cifar", 16, "inference"),
         ("zoo:alexnet-cifar", 16, "training"), ("zoo:vgg16-cifar", 8, "training")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mosaic")
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    print("| model | batch | mode | backend | iteration, metrics off (ms) | cost: median of %d runs | range |" % a.runs)
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        for model, batch, mode in CASES:
            costs, off = {}, {}
            for _ in range(a.runs):
                subprocess.run([a.mosaic, "bench", model, "--batch", str(batch), "--mode", mode, "--backends", "im2col,onednn",
                                "--no-check", "--no-db", "--iterations", "20", "--metrics-overhead", str(a.pairs),
                                "--json", out], check=True, capture_output=True, env=dict(os.environ, MOSAIC_PROGRESS="0"))
                for r in json.load(open(out))["runs"]:
                    costs.setdefault(r["label"], []).append(100 * r["summary"]["metrics_overhead"])
                    off.setdefault(r["label"], []).append(r["summary"]["metrics_off_ms"])
            for label in costs:
                c = sorted(costs[label])
                print("| %s | %d | %s | %s | %.4f | %+.2f%% | %+.2f .. %+.2f%% |" % (
                    model, batch, mode, label, sorted(off[label])[len(c) // 2], c[len(c) // 2], c[0], c[-1]), flush=True)


if __name__ == "__main__":
    main()
