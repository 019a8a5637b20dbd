#!/usr/bin/env python3
"""Measures `mosaic verify MODEL --per-node`'s false alarms: every backend, every node,
forward and backward, on models whose kernels are correct, at several batches and seeds.

A correct kernel must never be reported DIVERGES. One JSON line per (model, batch, seed)
run; --table prints the summary for docs/conformance.md.

usage: per_node_corpus.py MOSAIC CORPUS_DIR [--batches 2,32] [--seeds 1-2] [--results FILE] [--table]
CORPUS_DIR holds the ONNX exports of bench/gradcheck_corpus.py (run that first).
"""
import argparse
import json
import os
import re
import subprocess
import time

ZOO = ["fmnist-cnn", "alexnet-cifar", "vgg16-cifar"]


def models(corpus):
    found = [("zoo:" + z, z) for z in ZOO]
    for f in sorted(os.listdir(corpus)):
        if f.endswith(".onnx"):
            found.append((os.path.join(corpus, f), f[:-5]))
    return found


def run(mosaic, model, batch, seed):
    t0 = time.time()
    r = subprocess.run([mosaic, "verify", model, "--per-node", "--backend", "all", "--batch", str(batch),
                        "--seed", str(seed)], capture_output=True, text=True)
    out = r.stdout
    lines = [l for l in out.splitlines() if re.search(r"\s(ok|DIVERGES.*|UNSUPPORTED.*)$", l)]
    return {"exit": r.returncode, "seconds": round(time.time() - t0, 1),
            "judged": sum(1 for l in lines if l.endswith(" ok") or "DIVERGES" in l),
            "diverges": [l.split()[0] + " " + l.split()[2] for l in lines if "DIVERGES" in l],
            "error": r.stderr.strip().splitlines()[-1] if r.returncode not in (0, 1) and r.stderr.strip() else ""}


def table(path):
    rows = [json.loads(l) for l in open(path)]
    print("| model | batches | seeds | node verdicts (forward + backward, 3 backends) | DIVERGES | errors |")
    print("|---|---|---|---|---|---|")
    for name in sorted({r["model"] for r in rows}):
        rs = [r for r in rows if r["model"] == name]
        print("| %s | %s | %s | %d | %d | %d |" % (
            name, ",".join(str(b) for b in sorted({r["batch"] for r in rs})),
            ",".join(str(s) for s in sorted({r["seed"] for r in rs})), sum(r["judged"] for r in rs),
            sum(len(r["diverges"]) for r in rs), sum(1 for r in rs if r["error"])))
    print("\nTotal: %d runs, %d node verdicts, %d DIVERGES." % (
        len(rows), sum(r["judged"] for r in rows), sum(len(r["diverges"]) for r in rows)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mosaic")
    ap.add_argument("corpus")
    ap.add_argument("--batches", default="2,32")
    ap.add_argument("--seeds", default="1-2")
    ap.add_argument("--results", default="per_node_corpus.jsonl")
    ap.add_argument("--table", action="store_true")
    a = ap.parse_args()
    if a.table:
        table(a.results)
        return
    lo, _, hi = a.seeds.partition("-")
    done = set()
    if os.path.exists(a.results):
        for l in open(a.results):
            r = json.loads(l)
            done.add((r["model"], r["batch"], r["seed"]))
    with open(a.results, "a") as f:
        for model, name in models(a.corpus):
            for batch in [int(b) for b in a.batches.split(",")]:
                for seed in range(int(lo), int(hi or lo) + 1):
                    if (name, batch, seed) in done:
                        continue
                    r = run(a.mosaic, model, batch, seed)
                    r.update({"model": name, "batch": batch, "seed": seed})
                    f.write(json.dumps(r) + "\n")
                    f.flush()
                    print("%-16s batch %-3d seed %d  exit %d  %d judged  %d DIVERGES %s %.0fs" % (
                        name, batch, seed, r["exit"], r["judged"], len(r["diverges"]), r["diverges"][:3], r["seconds"]),
                        flush=True)


if __name__ == "__main__":
    main()
