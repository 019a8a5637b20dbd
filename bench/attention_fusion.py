#!/usr/bin/python3
"""The fused attention node against the plain graph, side by side in one run.

Runs `mosaic bench MODEL --backend onednn --attention both --no-check --json` per batch:
each iteration set times the graph with every MatMul-scale-mask-Softmax-MatMul chain as one
FusedAttention node ("onednn") and the same graph unfused ("onednn-unfused-attention"),
one after the other in the same process. Prints a Markdown table: sequences/s of both, their
ratio, and the attention's own time per layer (the FusedAttention node's median against the
sum of the nodes it replaces: scores MatMul, scale, mask Add, Softmax, context MatMul).

usage: bench/attention_fusion.py [--mosaic build/mosaic] [--model zoo:bert-base]
                                 [--batches 1,8] [--threads 2] [--json docs/perf_attention.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run(args, batch):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        cmd = [args.mosaic, "bench", args.model, "--backend", "onednn", "--attention", "both", "--no-check",
               "--batch", str(batch), "--threads", str(args.threads), "--warmup", str(args.warmup),
               "--iterations", str(args.iterations), "--max-seconds", str(args.max_seconds), "--no-db", "--json", out]
        print("+", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            return json.load(f)


def fused_nodes(config):
    """The FusedAttention rows of a configuration's per-node table."""
    return [n for n in config["nodes"] if n["op"] == "FusedAttention" and n.get("median_us") is not None]


def attention_us(fused, plain):
    """Median microseconds of the attention per layer: the fused node's, and the sum of the
    plain graph's nodes it replaced (named by the parts of the fused node's name)."""
    nodes = fused_nodes(fused)
    parts = {part for n in nodes for part in n["name"].split("+")}
    plain_us = sum(n["median_us"] for n in plain["nodes"] if n.get("median_us") is not None and n["name"] in parts)
    layers = max(len(nodes), 1)
    return sum(n["median_us"] for n in nodes) / layers, plain_us / layers, len(nodes)

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mosaic", default="build/mosaic")
    p.add_argument("--model", default="zoo:bert-base")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--max-seconds", type=float, default=60)
    p.add_argument("--json")
    args = p.parse_args()
    results = []
    print("| batch | fused seq/s | unfused seq/s | fused / unfused | attention per layer, fused us | unfused us (its parts) |")
    print("|---|---|---|---|---|---|")
    for batch in [int(b) for b in args.batches.split(",")]:
        report = run(args, batch)
        by_label = {c["label"]: c for c in report["runs"]}
        fused, plain = by_label["onednn"], by_label["onednn-unfused-attention"]
        fused_us, unfused_us, layers = attention_us(fused, plain)
        row = {"model": args.model, "batch": batch, "threads": args.threads,
               "fused_seq_per_s": fused["summary"]["images_per_s"],
               "unfused_seq_per_s": plain["summary"]["images_per_s"],
               "ratio": fused["summary"]["images_per_s"] / plain["summary"]["images_per_s"],
               "attention_fused_us": fused_us, "attention_unfused_us": unfused_us,
               "fused_nodes": layers}
        results.append(row)
        print(f"| {batch} | {row['fused_seq_per_s']:.2f} | {row['unfused_seq_per_s']:.2f} | **{row['ratio']:.2f}x** "
              f"| {row['attention_fused_us']:.0f} | {row['attention_unfused_us']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "provenance": report.get("provenance")}, f, indent=1)


if __name__ == "__main__":
    main()
