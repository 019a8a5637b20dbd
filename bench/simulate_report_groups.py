#!/usr/bin/python3
"""Seed 001's parallel-scale groups (1n1c, 1n4c, 2n8c, 4n16c: nodes x V100s) by simulation.

The framework test report trained ResNet-50 and VGG-16 (ImageNet, 224x224) on up to 4 nodes
of 4 Tesla V100s joined by InfiniBand RDMA (11,470 MB/s measured there), at per-GPU batch 1,
64 and max, and plotted throughput and speed-up per group. Mosaic cannot run V100s; this
script predicts the same groups with `mosaic simulate` on stated assumptions:

  - per-layer compute: torchvision's resnet50 / vgg16 exported at 224x224 and profiled here
    (training, onednn, --profile-batch), then scaled linearly to the group's per-GPU batch
    and uniformly to an assumed V100 FP32 throughput (ASSUMED below: published single-V100
    training rates of the era; batch 1 is launch-bound, far below batch 64 x 1/64);
  - the bucket schedule of Mosaic's all-reduce (25 MB buckets, ring), overlapped with
    backward ("allreduce") and not ("allreduce-blocking");
  - links: GPUs within a node over PCIe 3.0 (preset pcie3-gpu, device-side reduction),
    nodes over InfiniBand EDR (preset ib-edr: 11.47 GB/s, the report's measured figure).

Writes a Markdown table (and --json everything) of images/s and speed-up per group.
usage: bench/simulate_report_groups.py [--mosaic build/mosaic] [--profile-batch 4] [--json F]
"""
import argparse
import json
import os
import subprocess
import tempfile

# Assumed single-V100 FP32 training throughput (images/s) at per-GPU batch 64 and 1.
ASSUMED = {("resnet50", 64): 360.0, ("resnet50", 1): 100.0, ("vgg16", 64): 230.0, ("vgg16", 1): 60.0}
GROUPS = "1n1c,1n4c,2n8c,4n16c"

EXPORT = r'''
import sys, torch, torchvision
m = getattr(torchvision.models, sys.argv[1])(weights=None)
m.eval()
torch.onnx.export(m, torch.zeros(1, 3, 224, 224), sys.argv[2], input_names=["x"], output_names=["y"],
                  dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, opset_version=13, do_constant_folding=True)
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--profile-batch", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in ("resnet50", "vgg16"):
            onnx = os.path.join(tmp, model + ".onnx")
            subprocess.run(["/usr/bin/python3", "-c", EXPORT, model, onnx], check=True)
            prof = os.path.join(tmp, model + "-profile.json")
            subprocess.run([args.mosaic, "bench", onnx, "--mode", "training", "--backends", "onednn", "--batch",
                            str(args.profile_batch), "--iterations", str(args.iterations), "--warmup", "1",
                            "--no-check", "--no-db", "--no-peaks", "--json", prof],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for batch in (1, 64):
                out = os.path.join(tmp, f"{model}-{batch}.json")
                subprocess.run([args.mosaic, "simulate", prof, "--predict-batch", str(batch), "--target-images-per-s",
                                str(ASSUMED[(model, batch)]), "--groups", GROUPS, "--network", "ib-edr", "--intra",
                                "pcie3-gpu", "--mode", "allreduce,allreduce-blocking", "--json", out],
                               check=True, stdout=subprocess.DEVNULL)
                with open(out) as f:
                    sim = json.load(f)
                for p in sim["predictions"]:
                    rows.append({"model": model, "batch": batch, "mode": p["mode"], "group": p["group"],
                                 "images_per_s": p["images_per_s"], "speedup": p["speedup"],
                                 "comm_share": p["comm_share"], "gradient_mb": sim["gradient_bytes"] / 1e6})
    print("| model | per-GPU batch | mode | " + " | ".join(GROUPS.split(",")) + " |")
    print("|---|---|---|" + "---|" * len(GROUPS.split(",")))
    for model in ("resnet50", "vgg16"):
        for batch in (1, 64):
            for mode in ("allreduce", "allreduce-blocking"):
                cells = [r for r in rows if r["model"] == model and r["batch"] == batch and r["mode"] == mode]
                print(f"| {model} | {batch} | {mode} | " +
                      " | ".join(f"{r['images_per_s']:.0f} ({r['speedup']:.1f}x)" for r in cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "assumed_v100_images_per_s": {f"{m}@{b}": v for (m, b), v in ASSUMED.items()},
                       "groups": GROUPS, "settings": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
