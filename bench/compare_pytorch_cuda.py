#!/usr/bin/env python3
"""Side by side on one GPU: Mosaic's cuda backend vs PyTorch eager on CUDA (issue 33's targets).

Both run the same architectures with random weights: alexnet-cifar and vgg16-cifar (the zoo's,
built with torch.nn in bench/compare_pytorch.py) and ResNet-50 (torchvision's v1.5 layout,
built here so that torchvision is not needed; Mosaic's zoo:resnet50). PyTorch runs in float32
with TF32 off (torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32 False,
as Mosaic's cuda backend computes without --precision tf32) and cudnn.benchmark on (cuDNN's
algorithm search, as Mosaic's per-shape search). Each timed PyTorch batch does what one Mosaic
run does: the input copied to the GPU, the forward pass, the output copied back; the median of
the measured batches after a warm-up. Mosaic runs `mosaic bench --backends cuda --json`, whose
summary gives images/s and the per-node host overhead (the iteration minus the nodes' kernel
times, per node).

Training rows (--train-batches, default 64): one training step each side on a fixed random
batch with random labels: the batch copied in, forward in training mode, softmax
cross-entropy, backward, plain SGD (lr 0.01); PyTorch with model.train() and torch.optim.SGD,
Mosaic with `bench --mode training` (parameters resident on the GPU and updated there by its
SGD kernel; the loss computed on the GPU too, only each row's loss and hit copied out).

Prints a Markdown table and writes --json (the figures, the GPU, the versions).

usage: bench/compare_pytorch_cuda.py [--mosaic build/mosaic] [--models alexnet-cifar,vgg16-cifar,resnet50]
                                     [--batches 64,1] [--train-batches 64] [--warmup 10] [--iterations 50]
                                     [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_pytorch import alexnet_cifar, vgg16_cifar  # noqa: E402  (the zoo's CNNs in torch.nn)


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 bottleneck (v1.5: the stride on the 3x3 convolution)."""

    def __init__(self, cin, width, stride, downsample):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
            if downsample else None

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (self.downsample(x) if self.downsample is not None else x))


def resnet50():
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for stage, blocks in enumerate((3, 4, 6, 3)):
        width = 64 << stage
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, 2 if i == 0 and stage > 0 else 1, i == 0))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


MODELS = {"alexnet-cifar": (alexnet_cifar, (3, 32, 32)), "vgg16-cifar": (vgg16_cifar, (3, 32, 32)),
          "resnet50": (resnet50, (3, 224, 224))}


def median_batch(step, batch, warmup, iterations):
    """Times `step()` (one batch, synchronised on both ends) after `warmup` untimed calls: images/s
    and the median batch time."""
    times = []
    for i in range(warmup + iterations):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {"images_per_s": batch / med, "median_ms": med * 1e3, "measured": len(times)}


def time_pytorch(name, batch, warmup, iterations):
    build, shape = MODELS[name]
    model = build().cuda().eval()
    x = torch.randn(batch, *shape).pin_memory()
    with torch.no_grad():
        return median_batch(lambda: model(x.cuda(non_blocking=True)).cpu(), batch, warmup, iterations)


def pytorch_math(tf32=False):
    """PyTorch's settings for every comparison with Mosaic's cuda backend: TF32 off (as cuda
    computes without --precision tf32) unless asked for, cuDNN's benchmark mode on (its timed
    algorithm choice, as cuda's search)."""
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True


def pytorch_training(name, batch):
    """The training step's parts: the model in training mode on the GPU, plain SGD (lr 0.01), a
    pinned random batch and random labels on the GPU."""
    build, shape = MODELS[name]
    model = build().cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, *shape).pin_memory()
    with torch.no_grad():
        classes = model(x[:2].cuda()).shape[1]
    labels = torch.randint(0, classes, (batch,)).cuda()
    return model, opt, x, labels


def time_pytorch_train(name, batch, warmup, iterations):
    model, opt, x, labels = pytorch_training(name, batch)

    def step():
        loss = nn.functional.cross_entropy(model(x.cuda(non_blocking=True)), labels)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        loss.item()  # the loss on the host, as Mosaic reports it

    return median_batch(step, batch, warmup, iterations)


def mosaic_cuda_run(mosaic, name, batch, warmup, iterations, extra=()):
    """The JSON run of `mosaic bench zoo:NAME --backends cuda` (unchecked, one repeat)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        cmd = [mosaic, "bench", "zoo:" + name, "--backends", "cuda", "--batch", str(batch), "--warmup", str(warmup),
               "--iterations", str(iterations), "--repeats", "1", "--no-check", "--no-peaks", "--no-db",
               "--json", tmp.name, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(" ".join(cmd) + " failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
        with open(tmp.name) as f:
            return json.load(f)["runs"][0]


def time_mosaic(mosaic, name, batch, warmup, iterations, training=False):
    run = mosaic_cuda_run(mosaic, name, batch, warmup, iterations, ("--mode", "training") if training else ())
    s = run["summary"]
    copies = sum((n.get("median_us") or 0) for n in run.get("nodes", []) if n.get("op", "").startswith("mosaic.To")) / 1e3
    return {"images_per_s": s["images_per_s"], "median_ms": s["median_ms"], "kernel_ms": s["kernel_ms"],
            "overhead_per_node_us": s.get("overhead_per_node_us", 0.0), "copy_ms": copies,
            "nodes": len(run.get("nodes", [])), "fallbacks": s["fallbacks"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--models", default="alexnet-cifar,vgg16-cifar,resnet50")
    ap.add_argument("--batches", default="64,1")
    ap.add_argument("--train-batches", default="64", help="training rows' batches ('' for none)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    pytorch_math()
    gpu = torch.cuda.get_device_name(0)
    header = (f"{gpu}; torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}; "
              f"float32, TF32 off; median of {args.iterations} batches after {args.warmup}")
    print(header + "\n")
    print("| model | mode | batch | PyTorch img/s | Mosaic cuda img/s | cuda / PyTorch | Mosaic copies ms | "
          "overhead per node us | fallbacks |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    failed = 0
    # Training first: a run cut off by its time limit keeps the newest figures.
    cells = [(name, "training", int(b)) for name in args.models.split(",") for b in args.train_batches.split(",") if b]
    cells += [(name, "inference", int(b)) for name in args.models.split(",") for b in args.batches.split(",") if b]
    for name, mode, batch in cells:
        training = mode == "training"
        pt = (time_pytorch_train if training else time_pytorch)(name, batch, args.warmup, args.iterations)
        try:
            mo = time_mosaic(args.mosaic, name, batch, args.warmup, args.iterations, training)
        except RuntimeError as e:  # one model failing leaves the others' rows
            failed += 1
            rows.append({"model": name, "mode": mode, "batch": batch, "pytorch": pt, "error": str(e)})
            print(f"| {name} | {mode} | {batch} | {pt['images_per_s']:.0f} | FAILED | | | | |", flush=True)
            print(str(e), file=sys.stderr)
        else:
            ratio = mo["images_per_s"] / pt["images_per_s"]
            rows.append({"model": name, "mode": mode, "batch": batch, "pytorch": pt, "mosaic_cuda": mo, "ratio": ratio})
            print(f"| {name} | {mode} | {batch} | {pt['images_per_s']:.0f} | {mo['images_per_s']:.0f} | {ratio:.2f}x | "
                  f"{mo['copy_ms']:.3f} | {mo['overhead_per_node_us']:.1f} | {mo['fallbacks']} |", flush=True)
        if args.json:  # after each row: a run cut off keeps what it measured
            with open(args.json + ".tmp", "w") as f:
                json.dump({"setup": header, "gpu": gpu, "torch": torch.__version__, "rows": rows}, f, indent=1)
            os.replace(args.json + ".tmp", args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
