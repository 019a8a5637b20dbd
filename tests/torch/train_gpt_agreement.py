#!/usr/bin/python3
"""Per-step training losses of a tiny GPT: Mosaic vs PyTorch 1.13 from the same ONNX weights.

Builds a small pre-norm causal decoder (token and position embeddings, 2 blocks of causal
self-attention and a tanh-GELU MLP, LayerNorm, an LM head), exports it with PyTorch's ONNX
exporter, and trains both the PyTorch model and Mosaic (on every backend) for STEPS steps on
a real text file as character tokens: the next-token objective, sequences in file order
(`--no-shuffle`), AdamW with weight decay and a linear warm-up then decay
(`--lr-schedule warmup-linear:W`). The per-step losses must agree to a relative 1e-3.

Mosaic numbers characters in order of first appearance (frontends/data/text.hpp); this script
does the same, so both see the same ids.

usage: train_gpt_agreement.py MOSAIC [--backends A,B] [--steps 20] [--text FILE] [--opset 17]
exit 0 when every backend agrees; 1 otherwise; 77 if torch or the text is missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

TEXT = "/usr/share/common-licenses/GPL-3"
SEQ, HIDDEN, HEADS, LAYERS, BATCH = 16, 32, 4, 2, 8


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mosaic")
    ap.add_argument("--backends", default="")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--rtol", type=float, default=1e-3)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn as nn
    except ImportError:
        print("python3-torch not installed: skipping")
        return 77
    if not os.path.exists(args.text):
        print(args.text + " missing: skipping")
        return 77
    backends = args.backends.split(",") if args.backends else subprocess.run(
        [args.mosaic, "backends", "--names", "--available"], capture_output=True, text=True, check=True).stdout.split()

    text = open(args.text, encoding="utf-8").read()
    index = {}
    ids = [index.setdefault(c, len(index)) for c in text]
    vocab = len(index)
    count = (len(ids) - 1) // SEQ
    train = count - max(1, count // 10)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt_models  # the decoder generate_agreement.py uses, at this script's sizes
    Gpt = gpt_models.make(vocab, HIDDEN, HEADS, LAYERS, SEQ)[0]

    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = Gpt()
    tmp = os.environ.get("MOSAIC_GPT_DIR") or tempfile.mkdtemp(prefix="mosaic_gpt_")
    onnx_path = os.path.join(tmp, "gpt.onnx")
    torch.onnx.export(model, torch.zeros(BATCH, SEQ, dtype=torch.long), onnx_path, opset_version=args.opset,
                      input_names=["ids"], output_names=["logits"],
                      dynamic_axes={"ids": {0: "batch"}, "logits": {0: "batch"}})

    lr, wd, warmup = 1e-3, 0.01, 5
    total = args.steps
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)))
    data = torch.tensor(ids[: train * SEQ + 1])
    ref = []
    model.train()
    for step in range(total):
        b = step % (train // BATCH)
        starts = [(b * BATCH + i) * SEQ for i in range(BATCH)]
        x = torch.stack([data[s:s + SEQ] for s in starts])
        y = torch.stack([data[s + 1:s + SEQ + 1] for s in starts])
        loss = nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        ref.append(loss.item())

    ok = True
    for backend in backends:
        out = os.path.join(tmp, backend + ".json")
        cmd = [args.mosaic, "train", onnx_path, "--data", "text-chars:" + args.text, "--backend", backend,
               "--optimizer", "adamw", "--lr", str(lr), "--weight-decay", str(wd),
               "--lr-schedule", "warmup-linear:%d" % warmup, "--batch", str(BATCH), "--steps", str(total),
               "--epochs", "1", "--no-shuffle", "--no-eval", "--no-db", "--json", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print("%s: mosaic train failed (%d): %s" % (backend, r.returncode, (r.stderr or r.stdout).strip()))
            ok = False
            continue
        got = [s["loss"] for s in json.load(open(out))["steps"]]
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
        agree = len(got) == len(ref) and worst <= args.rtol
        ok = ok and agree
        print("%-7s %s: %d steps, loss %.4f -> %.4f (PyTorch %.4f -> %.4f), worst relative difference %.2e" %
              (backend, "agrees" if agree else "DIFFERS", len(got), got[0], got[-1], ref[0], ref[-1], worst))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
