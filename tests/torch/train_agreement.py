#!/usr/bin/python3
"""Per-step training losses of Mosaic vs PyTorch 1.13 from the same start.

Exports Mosaic's zoo model fmnist-cnn (seeded weights), loads those exact weights into an
equivalent torch.nn model, and trains both for STEPS steps on the first STEPS*BATCH
Fashion-MNIST training images in file order (`--no-shuffle`), no augmentation, with the same
optimizer and hyperparameters. The per-step losses must agree to a relative 1e-3. When a
backend differs, `mosaic verify --per-node` names the first node whose forward or backward,
alone on naive's inputs, leaves tolerance against naive.

usage: train_agreement.py MOSAIC [--backends A,B,...] [--optimizers sgd,adam] [--steps 20] [--batch 64]
                          [--loss cross-entropy|mse]
exit 0 when every (backend, optimizer) agrees; 1 otherwise; 77 if data or torch is missing.
"""
import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

DATA = "/usr/share/datasets/fashion-mnist"


def diagnose(mosaic, model_path, backend, batch):
    """Names the first node whose forward or backward leaves tolerance against naive on its own inputs."""
    if backend == "naive":
        print("  naive is the oracle: the difference is in the model, the data or the optimizer, not in a node")
        return
    r = subprocess.run([mosaic, "verify", model_path, "--per-node", "--backend", backend, "--batch", str(batch)],
                       capture_output=True, text=True)
    lines = [l for l in r.stdout.splitlines() if l.startswith(("==", "first divergent", "all "))]
    for l in lines:
        print("  " + l, flush=True)
    if r.returncode == 0:
        print("  every node agrees with naive alone, so the difference accumulates across nodes or steps", flush=True)


def registered_backends(mosaic):
    return subprocess.run([mosaic, "backends", "--names", "--available"], capture_output=True, text=True, check=True).stdout.split()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mosaic")
    ap.add_argument("--backends", default="", help="comma-separated (default: every backend the binary registers)")
    ap.add_argument("--optimizers", default="sgd,adam")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--loss", default="cross-entropy", choices=["cross-entropy", "mse"],
                    help="mse: PyTorch's MSELoss against one-hot targets, Mosaic's train --loss mse")
    args = ap.parse_args()
    backends = args.backends.split(",") if args.backends else registered_backends(args.mosaic)
    try:
        import numpy as np
        import onnx
        import torch
        import torch.nn as nn
        from onnx import numpy_helper
    except ImportError as e:
        print("skipping: " + str(e))
        return 77
    if not os.path.isdir(DATA):
        print("skipping: " + DATA + " missing (apt-get install dataset-fashion-mnist)")
        return 77
    torch.set_num_threads(2)
    n = args.steps * args.batch
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        _, count, rows, cols = struct.unpack(">IIII", f.read(16))
        images = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8).reshape(n, 1, rows, cols)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        f.read(8)
        labels = np.frombuffer(f.read(n), dtype=np.uint8)
    x_all = torch.tensor(images, dtype=torch.float32) / 255.0
    y_all = torch.tensor(labels, dtype=torch.int64)

    configs = [("sgd", {"lr": 0.05}, lambda p: torch.optim.SGD(p, lr=0.05)),
               ("adam", {"lr": 0.002}, lambda p: torch.optim.Adam(p, lr=0.002))]
    wanted = set(args.optimizers.split(","))
    configs = [c for c in configs if c[0] in wanted]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        model_path = os.path.join(tmp, "fmnist.onnx")
        subprocess.run([args.mosaic, "export", "fmnist-cnn", "-o", model_path], check=True, stdout=subprocess.DEVNULL)
        weights = {t.name: torch.tensor(numpy_helper.to_array(t).copy()) for t in onnx.load(model_path).graph.initializer}
        for opt_name, hp, make_opt in configs:
            model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
                                  nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
                                  nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
            names = {0: "conv1", 3: "conv2", 7: "fc1", 9: "fc2"}
            with torch.no_grad():
                for idx, name in names.items():
                    model[idx].weight.copy_(weights[name + ".weight"])
                    model[idx].bias.copy_(weights[name + ".bias"])
            opt = make_opt(model.parameters())
            if args.loss == "mse":
                def loss_fn(logits, labels):
                    return nn.functional.mse_loss(logits, nn.functional.one_hot(labels, logits.shape[1]).float())
            else:
                loss_fn = nn.CrossEntropyLoss()
            torch_losses = []
            for s in range(args.steps):
                xb = x_all[s * args.batch:(s + 1) * args.batch]
                yb = y_all[s * args.batch:(s + 1) * args.batch]
                opt.zero_grad()
                loss = loss_fn(model(xb), yb)
                loss.backward()
                opt.step()
                torch_losses.append(loss.item())
            for backend in backends:
                out = os.path.join(tmp, f"{opt_name}_{backend}.json")
                subprocess.run([args.mosaic, "train", model_path, "--data", "fashion-mnist", "--backend", backend,
                                "--optimizer", opt_name, "--lr", str(hp["lr"]), "--batch", str(args.batch),
                                "--steps", str(args.steps), "--no-shuffle", "--no-eval", "--loss", args.loss, "--json", out,
                                "--threads", "2"],
                               check=True, stdout=subprocess.DEVNULL)
                with open(out) as f:
                    mosaic_losses = [s["loss"] for s in json.load(f)["steps"]]
                worst = max(abs(a - b) / abs(b) for a, b in zip(mosaic_losses, torch_losses))
                agree = len(mosaic_losses) == len(torch_losses) and worst <= args.rtol
                ok = ok and agree
                print(f"{'AGREE' if agree else 'DIFFER'} {opt_name:5s} [{backend}] {len(mosaic_losses)} steps, "
                      f"worst relative difference {worst:.2e} (first {mosaic_losses[0]:.5f} vs {torch_losses[0]:.5f}, "
                      f"last {mosaic_losses[-1]:.5f} vs {torch_losses[-1]:.5f})", flush=True)
                if not agree:
                    diagnose(args.mosaic, model_path, backend, args.batch)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
