#!/usr/bin/env python3
"""Where a training step on Mosaic's cuda backend loses to PyTorch eager on CUDA: stage by stage,
then device time per layer kind, forward and backward, side by side.

The step is bench/compare_pytorch_cuda.py's (same architectures, random weights, float32 with TF32
off, cudnn.benchmark on; plain SGD at lr 0.01, softmax cross-entropy on random labels). PyTorch's
stages are timed on the host with a synchronisation after each (forward, loss, backward,
optimizer: the sum is a little more than an unsynchronised step), Mosaic's are `bench --mode
training`'s summary (forward_ms, loss_ms, backward_ms, optimizer_ms). Per kind: PyTorch with CUDA
events recorded around every leaf module's forward (forward hooks) and backward (full backward
hooks: from the module's output gradient to its input gradient, which can take in other work that
autograd runs between them, so read those as approximate), Mosaic from its per-node forward and
backward times (a fused node counts under its op).

usage: bench/profile_cuda_training.py [--mosaic build/mosaic] [--model resnet50] [--batch 64]
                                      [--iterations 10] [--json out.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_pytorch_cuda import MODELS, mosaic_cuda_run, pytorch_math, pytorch_training  # noqa: E402
from profile_cuda_nodes import KINDS  # noqa: E402

STAGES = ("forward", "loss", "backward", "optimizer")


def pytorch_profile(name, batch, warmup, iterations):
    """({stage: median ms}, {kind: [forward us, backward us]}) of PyTorch's training step."""
    model, opt, x, labels = pytorch_training(name, batch)

    def step(sync):
        marks = [time.perf_counter()]
        out = model(x.cuda(non_blocking=True))
        sync(marks)
        loss = nn.functional.cross_entropy(out, labels)
        sync(marks)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        sync(marks)
        opt.step()
        loss.item()
        sync(marks)
        return [(b - a) * 1e3 for a, b in zip(marks, marks[1:])]

    def sync(marks):
        torch.cuda.synchronize()
        marks.append(time.perf_counter())

    stage_ms = []
    for i in range(warmup + iterations):
        torch.cuda.synchronize()
        t = step(sync)
        if i >= warmup:
            stage_ms.append(t)
    stages = {s: statistics.median(r[k] for r in stage_ms) for k, s in enumerate(STAGES)}

    # Per kind, with hooks (a separate pass: the hooks' own events and autograd nodes stay out of
    # the stage times).
    events = []  # (kind, "forward" | "backward", start, end)

    def pair(kind, direction):
        e = [kind, direction, torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)]
        events.append(e)
        e[2].record()
        return e

    open_backward = {}
    for m in model.modules():
        if type(m) not in KINDS:
            continue
        kind = KINDS[type(m)]
        m.register_forward_pre_hook(lambda mod, _, k=kind: open_backward.setdefault(("f", id(mod)), []).append(pair(k, "forward")))
        m.register_forward_hook(lambda mod, _i, _o: open_backward[("f", id(mod))].pop()[3].record())
        m.register_full_backward_pre_hook(
            lambda mod, _g, k=kind: open_backward.setdefault(("b", id(mod)), []).append(pair(k, "backward")))
        m.register_full_backward_hook(lambda mod, _gi, _go: open_backward[("b", id(mod))].pop()[3].record())
    per_kind = {}
    for i in range(warmup + iterations):
        events.clear()
        step(lambda marks: None)
        torch.cuda.synchronize()
        if i < warmup:
            continue
        sums = {}
        for kind, direction, start, end in events:
            try:
                us = start.elapsed_time(end) * 1e3
            except RuntimeError:  # a hook that did not fire (the first layer's input needs no gradient)
                continue
            sums.setdefault(kind, [0.0, 0.0])[direction == "backward"] += us
        for kind, (f, b) in sums.items():
            per_kind.setdefault(kind, ([], []))
            per_kind[kind][0].append(f)
            per_kind[kind][1].append(b)
    return stages, {k: [statistics.median(f), statistics.median(b)] for k, (f, b) in per_kind.items()}


def mosaic_profile(mosaic, name, batch, warmup, iterations):
    """({stage: ms}, {kind: [forward us, backward us]}, [other forward us, other backward us], step ms,
    the 12 nodes with the most backward time as (backward us, forward us, node, op, output shape))."""
    run = mosaic_cuda_run(mosaic, name, batch, warmup, iterations, ("--mode", "training"))
    s = run["summary"]
    stages = {st: s.get(st + "_ms") or 0.0 for st in STAGES}
    per_kind, other = {}, [0.0, 0.0]
    for n in run["nodes"]:
        f, b = n.get("median_us") or 0.0, n.get("backward_median_us") or 0.0
        row = per_kind.setdefault(n["op"], [0.0, 0.0]) if n["op"] in KINDS.values() else other
        row[0] += f
        row[1] += b
    slowest = sorted(((n.get("backward_median_us") or 0.0, n.get("median_us") or 0.0, n["name"], n["op"],
                       n.get("output_shape", "")) for n in run["nodes"]), reverse=True)[:12]
    return stages, per_kind, other, s["median_ms"], slowest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    pytorch_math()
    pt_stages, pt_kinds = pytorch_profile(args.model, args.batch, args.warmup, args.iterations)
    mo_stages, mo_kinds, other, mo_step, slowest = mosaic_profile(args.mosaic, args.model, args.batch, args.warmup,
                                                        args.iterations)
    print(f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; "
          f"{args.model} training step, batch {args.batch}, float32 with TF32 off, SGD; median of {args.iterations}\n")
    print("| stage | Mosaic ms | PyTorch ms (synchronised) | Mosaic / PyTorch |")
    print("|---|---|---|---|")
    for st in STAGES:
        m, p = mo_stages[st], pt_stages[st]
        print(f"| {st} | {m:.2f} | {p:.2f} | {m / p if p else float('nan'):.2f}x |")
    print(f"| step | {mo_step:.2f} | {sum(pt_stages.values()):.2f} | "
          f"{mo_step / sum(pt_stages.values()):.2f}x |\n")
    print("| kind | Mosaic forward us | PyTorch forward us | Mosaic backward us | PyTorch backward us (approx.) |")
    print("|---|---|---|---|---|")
    for kind in KINDS.values():
        m, p = mo_kinds.get(kind, [0.0, 0.0]), pt_kinds.get(kind, [0.0, 0.0])
        if any(m) or any(p):
            print(f"| {kind} | {m[0]:.0f} | {p[0]:.0f} | {m[1]:.0f} | {p[1]:.0f} |")
    print(f"| other (Add, copies, views) | {other[0]:.0f} | | {other[1]:.0f} | |\n")
    print("Mosaic's nodes with the most backward time:\n")
    print("| node | op | output | forward us | backward us |")
    print("|---|---|---|---|---|")
    for b, f, node, op, shape in slowest:
        print(f"| {node} | {op} | {shape} | {f:.0f} | {b:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "batch": args.batch, "mosaic_stages_ms": mo_stages, "pytorch_stages_ms": pt_stages,
                       "mosaic_step_ms": mo_step, "mosaic_kinds_us": mo_kinds, "pytorch_kinds_us": pt_kinds,
                       "mosaic_other_us": other, "mosaic_slowest_backward": slowest}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
