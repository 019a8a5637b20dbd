#!/usr/bin/env python3
"""Where Mosaic's cuda backend loses to PyTorch eager on CUDA: device time per layer, side by side.

Runs one of bench/compare_pytorch_cuda.py's models (same architecture, random weights, float32,
TF32 off unless --tf32, cudnn.benchmark on) in PyTorch with a CUDA event recorded before and after
every leaf module (Conv2d, BatchNorm2d, ReLU, pooling, Linear: the residual additions are not
modules and are left out on both sides), and Mosaic's `bench --backends cuda --json`, whose
per-node times are its own CUDA events around each step. Layers are matched by kind and order
(the n-th convolution of one against the n-th of the other), so the table says which layers
lose and by how much; a summary adds up each kind (a node Mosaic fused counts under its op:
conv1+bn1+relu is a Conv, against PyTorch's convolution alone) and all of them.

usage: bench/profile_cuda_nodes.py [--mosaic build/mosaic] [--model resnet50] [--batch 64]
                                   [--iterations 20] [--tf32] [--json out.json]
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_pytorch_cuda import MODELS, mosaic_cuda_run, pytorch_math  # noqa: E402

# PyTorch's leaf modules as the ONNX op Mosaic's node carries.
KINDS = {nn.Conv2d: "Conv", nn.BatchNorm2d: "BatchNormalization", nn.ReLU: "Relu", nn.MaxPool2d: "MaxPool",
         nn.AdaptiveAvgPool2d: "GlobalAveragePool", nn.Linear: "Gemm"}


def pytorch_layers(name, batch, warmup, iterations):
    """[(kind, shape, median us)] per leaf-module call, in execution order."""
    build, shape = MODELS[name]
    model = build().cuda().eval()
    calls = []  # (kind, start event, end event, output shape) of the current pass

    def pre(module, _):
        calls.append([KINDS[type(module)], torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True),
                      None])
        calls[-1][1].record()

    def post(module, _, out):
        calls[-1][2].record()
        calls[-1][3] = list(out.shape)

    for m in model.modules():
        if type(m) in KINDS:
            m.register_forward_pre_hook(pre)
            m.register_forward_hook(post)
    x = torch.randn(batch, *shape, device="cuda")
    per_call = None
    with torch.no_grad():
        for i in range(warmup + iterations):
            calls.clear()
            model(x)
            torch.cuda.synchronize()
            if i < warmup:
                continue
            times = [c[1].elapsed_time(c[2]) * 1e3 for c in calls]
            if per_call is None:
                per_call = [(c[0], c[3], [t]) for c, t in zip(calls, times)]
            else:
                for row, t in zip(per_call, times):
                    row[2].append(t)
    return [(kind, shape, statistics.median(ts)) for kind, shape, ts in per_call]


def mosaic_layers(mosaic, name, batch, warmup, iterations, tf32):
    """[(op, node, output shape, median us)] per step of Mosaic's cuda run, in execution order."""
    run = mosaic_cuda_run(mosaic, name, batch, warmup, iterations, ["--precision", "tf32"] if tf32 else [])
    return [(n["op"], n["name"], n["output_shape"], n.get("median_us") or 0.0) for n in run["nodes"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--tf32", action="store_true", help="TF32 on both sides (Mosaic: --precision tf32)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    pytorch_math(args.tf32)
    pt = pytorch_layers(args.model, args.batch, args.warmup, args.iterations)
    mo = mosaic_layers(args.mosaic, args.model, args.batch, args.warmup, args.iterations, args.tf32)
    print(f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"{args.model} batch {args.batch}, {'TF32' if args.tf32 else 'float32, TF32 off'}; device time per layer "
          f"(median of {args.iterations}), layers matched by kind and order\n")
    rows, totals = [], {}
    for kind in KINDS.values():
        ours = [m for m in mo if m[0] == kind]
        theirs = [p for p in pt if p[0] == kind]
        if len(ours) != len(theirs):
            print(f"note: {kind}: Mosaic has {len(ours)} nodes, PyTorch {len(theirs)} calls; "
                  f"compared in order up to the shorter")
        for (_, node, shape, us), (_, pshape, pus) in zip(ours, theirs):
            rows.append({"kind": kind, "node": node, "shape": shape, "pytorch_shape": pshape, "mosaic_us": us,
                         "pytorch_us": pus})
        totals[kind] = [sum(m[3] for m in ours), sum(p[2] for p in theirs), len(ours), len(theirs)]
    others = sum(m[3] for m in mo if m[0] not in KINDS.values())
    # A fused node counts under its op (conv1+bn1+relu is a Conv): compare the sums too.
    print("| kind | Mosaic nodes | PyTorch calls | Mosaic us | PyTorch us | Mosaic / PyTorch |")
    print("|---|---|---|---|---|---|")
    for kind, (m_us, p_us, n, calls) in totals.items():
        if n or calls:
            print(f"| {kind} | {n} | {calls} | {m_us:.0f} | {p_us:.0f} | "
                  f"{m_us / p_us if p_us else float('nan'):.2f}x |")
    sum_m, sum_p = sum(t[0] for t in totals.values()), sum(t[1] for t in totals.values())
    print(f"| all of these | | | {sum_m:.0f} | {sum_p:.0f} | {sum_m / sum_p if sum_p else float('nan'):.2f}x |")
    print(f"| other (Add, copies, views: not modules) | | | {others:.0f} | | |\n")
    rows.sort(key=lambda r: r["pytorch_us"] - r["mosaic_us"])
    print("The ten layers Mosaic loses most time on:\n")
    print("| node | output | Mosaic us | PyTorch us | lost us |")
    print("|---|---|---|---|---|")
    for r in rows[:10]:
        print(f"| {r['node']} | {r['shape']} | {r['mosaic_us']:.1f} | {r['pytorch_us']:.1f} | "
              f"{r['mosaic_us'] - r['pytorch_us']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "batch": args.batch, "tf32": args.tf32, "totals": totals, "other_us": others,
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
