#!/usr/bin/python3
"""`--assign auto` against the best single backend, side by side in one run per model.

For each model, `mosaic bench MODEL --assign auto --remeasure` measures every candidate
backend alone, chooses a placement per node, and then times every candidate alone and the
auto plan one after another in the same process (each checked against naive), and finally
the auto plan and the fastest single backend in 5 alternating rounds. Prints a Markdown
table: the fastest single backend and its images/s, the auto plan's, the alternating
rounds' median ratio with its range (the noise it is judged against), and the nodes the
auto plan moved off that backend.

In training mode (--mode training) the costs are each node's forward plus backward in a
training step (SGD), and every plan's loss and gradients are checked against naive.

usage: bench/auto_placement.py [--mosaic build/mosaic] [--models zoo:alexnet-cifar,...]
                               [--batch 64] [--threads 0] [--mode inference|training]
                               [--iterations 100] [--json results/auto.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--models", default="zoo:alexnet-cifar,zoo:vgg16-cifar,build/torch_cases/test_resnet18/model.onnx")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--mode", default="inference", choices=["inference", "training"])
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    rows, out = [], {}
    print(f"mode {a.mode}\n")
    print("| model | batch | fastest single backend | its img/s | auto img/s | auto / single, alternating rounds (range) |"
          " nodes moved off it |")
    print("|---|---|---|---|---|---|---|")
    for model in a.models.split(","):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            cmd = [a.mosaic, "bench", model, "--assign", "auto", "--remeasure", "--batch", str(a.batch), "--iterations",
                   str(a.iterations), "--no-db", "--json", path]
            if a.mode == "training":
                cmd += ["--mode", "training"]
            if a.threads:
                cmd += ["--threads", str(a.threads)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                print(f"| {model} | {a.batch} | error: {p.stdout[-300:]} {p.stderr[-300:]} |||||", flush=True)
                continue
            doc = json.load(open(path))
        runs = {r["label"]: r for r in doc["runs"]}
        singles = {k: v for k, v in runs.items() if k != "auto"}
        best = min(singles, key=lambda k: singles[k]["summary"]["median_ms"])
        auto_ips = runs["auto"]["summary"]["images_per_s"]
        best_ips = singles[best]["summary"]["images_per_s"]
        moved = [n for n in doc.get("notes", []) if n.startswith("auto placement: ") and "nodes moved" in n]
        moved = moved[0].split(": ", 2)[-1] if moved else "none"
        ap_ = doc.get("auto_placement", {})
        ratio = (f"{ap_['side_by_side_ratio']:.3f} ({ap_['side_by_side_ratio_min']:.3f}..{ap_['side_by_side_ratio_max']:.3f})"
                 if "side_by_side_ratio" in ap_ else f"{auto_ips / best_ips:.3f}")
        print(f"| {model} | {a.batch} | {best} | {best_ips:.0f} | {auto_ips:.0f} | {ratio} | {moved} |", flush=True)
        out[model] = {"mode": a.mode, "batch": a.batch, "best_single": best, "images_per_s": {k: v["summary"]["images_per_s"]
                                                                                for k, v in runs.items()},
                      "auto_placement": doc.get("auto_placement", {}), "notes": doc.get("notes", []), "provenance": doc.get("provenance", {})}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
