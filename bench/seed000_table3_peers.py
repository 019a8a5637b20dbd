#!/usr/bin/env python3
"""Seed 000's Table 3 with TensorFlow and PyTorch beside Mosaic: training accuracy by epoch
for each optimizer and learning rate, AlexNet-CIFAR and VGG16-CIFAR, on the same data files
and from the same initial weights as Mosaic's sweeps (examples/sweeps/seed_table3_*.yaml).

Each cell (model, engine, optimizer, learning rate) is one fresh process of this script's
`worker` command in the peers' interpreter: the model rebuilt from the ONNX file `mosaic
export` writes for the zoo model (the weights Mosaic's sweep starts from, seed 0) as
bench/compare_pytorch.py's PyTorch module or bench/tf_peer.py's Keras model, the optimizer
with PyTorch's defaults (tf_peer's Keras rules compute PyTorch's), softmax cross-entropy
averaged over the batch, the CIFAR binary files read as Mosaic reads them (pixels / 255, no
normalisation; CIFAR-100's fine label), and Mosaic's batches in Mosaic's order (its shuffle
reproduced: std::mt19937_64 from seed 0, Fisher-Yates every epoch), --batch images each, the
remainder dropped: so PyTorch, TensorFlow and Mosaic start from the same weights and see the
same batches, and their accuracies part only where float rounding grows into another path. The running train accuracy of an epoch is the share of its images whose prediction
(before that batch's update) was right, as Mosaic's sweep records it.

The JSON (--json) is rewritten after every cell and a rerun skips the cells it holds
(resume). --markdown writes one table per model with Mosaic's rows (read from the sweeps'
JSON, --mosaic) and the seed's published accuracy at epochs 5 and 10 (its 50,000-image
epochs) beside each framework's rows.

usage: bench/seed000_table3_peers.py --data build/fmnist-as-cifar [--models alexnet-cifar,vgg16-cifar]
          [--engines pytorch,tensorflow] [--optimizers sgd,adam,rmsprop] [--lrs 0.01,0.001,0.0001]
          [--epochs 10] [--batch 100] [--threads 2] [--json F] [--markdown F]
          [--mosaic-json docs/seeds/table3_alexnet_sweep.json,docs/seeds/table3_vgg16_sweep.json]
       bench/seed000_table3_peers.py worker ENGINE MODEL ONNX DATA_DIR OPTIMIZER LR EPOCHS BATCH THREADS
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The seed's Table 3 (train accuracy after epochs 5 and 10 of CIFAR; None: the seed's blank
# cell, a run that did not train). Keys: model, framework, optimizer, learning rate.
SEED = {
    ("alexnet-cifar", "tensorflow", "sgd"): {0.01: (0.517, 0.657), 0.001: (0.335, 0.424), 0.0001: (0.139, 0.211)},
    ("alexnet-cifar", "tensorflow", "adam"): {0.01: None, 0.001: None, 0.0001: (0.703, 0.823)},
    ("alexnet-cifar", "tensorflow", "rmsprop"): {0.01: None, 0.001: None, 0.0001: (0.641, 0.85)},
    ("alexnet-cifar", "pytorch", "sgd"): {0.01: (0.614, 0.727), 0.001: (0.399, 0.49), 0.0001: (0.249, 0.265)},
    ("alexnet-cifar", "pytorch", "adam"): {0.01: None, 0.001: (0.692, 0.76), 0.0001: (0.717, 0.824)},
    ("alexnet-cifar", "pytorch", "rmsprop"): {0.01: None, 0.001: (0.478, 0.576), 0.0001: (0.709, 0.844)},
    ("vgg16-cifar", "tensorflow", "sgd"): {0.01: None, 0.001: None, 0.0001: None},
    ("vgg16-cifar", "tensorflow", "adam"): {0.01: None, 0.001: (0.11, 0.274), 0.0001: (0.153, 0.296)},
    ("vgg16-cifar", "tensorflow", "rmsprop"): {0.01: None, 0.001: (0.068, 0.286), 0.0001: (0.098, 0.205)},
    ("vgg16-cifar", "pytorch", "sgd"): {0.01: (0.029, 0.107), 0.001: (0.016, 0.024), 0.0001: None},
    ("vgg16-cifar", "pytorch", "adam"): {0.01: None, 0.001: (0.211, 0.371), 0.0001: (0.29, 0.418)},
    ("vgg16-cifar", "pytorch", "rmsprop"): {0.01: None, 0.001: (0.124, 0.275), 0.0001: (0.225, 0.373)},
}
DATA = {"alexnet-cifar": "cifar10", "vgg16-cifar": "cifar100"}
NAMES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}


def read_cifar(directory, which):
    """CIFAR-10's five training files or CIFAR-100's train.bin, as Mosaic's loader reads them:
    NCHW float32 pixels / 255 and the (fine) label, the files' order."""
    files = ([f"data_batch_{k}.bin" for k in range(1, 6)] if which == "cifar10" else ["train.bin"])
    label_bytes = 1 if which == "cifar10" else 2
    raw = b"".join(open(os.path.join(directory, which, f), "rb").read() for f in files)
    rec = np.frombuffer(raw, np.uint8).reshape(-1, label_bytes + 3072)
    return (rec[:, label_bytes:].reshape(-1, 3, 32, 32).astype(np.float32) / 255.0,
            rec[:, label_bytes - 1].astype(np.int64))


class Mt19937_64:
    """The C++ standard's std::mt19937_64 (the engine of Mosaic's BatchIterator), so that the
    peers see Mosaic's batches in Mosaic's order. Its 10000th output from the default seed is
    9981545732273789042, as the standard requires (checked in main)."""

    def __init__(self, seed=5489):
        m = (1 << 64) - 1
        self.mt = [seed & m]
        for i in range(1, 312):
            self.mt.append((6364136223846793005 * (self.mt[-1] ^ (self.mt[-1] >> 62)) + i) & m)
        self.i = 312

    def __call__(self):
        m, mt = (1 << 64) - 1, self.mt
        if self.i >= 312:
            for k in range(312):
                y = (mt[k] & 0xFFFFFFFF80000000) | (mt[(k + 1) % 312] & 0x7FFFFFFF)
                mt[k] = mt[(k + 156) % 312] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
            self.i = 0
        y = mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & m


def epochs_of(x, y, batch, epochs, seed=0):
    """Per epoch, the batches Mosaic's trainer takes (frontends/data/dataset.cpp, BatchIterator):
    the order shuffled at the start of every epoch by Fisher-Yates from the last position down,
    swapping with rng() % (i + 1), rng a std::mt19937_64 seeded with the run's seed (a sweep's
    `seed`, 0); batch b is positions b*batch .. (b+1)*batch - 1; the remainder dropped."""
    rng, order = Mt19937_64(seed), list(range(len(y)))
    for _ in range(epochs):
        for i in range(len(order), 1, -1):
            j = rng() % i
            order[i - 1], order[j] = order[j], order[i - 1]
        idx = np.array(order)
        yield [(x[idx[i:i + batch]], y[idx[i:i + batch]]) for i in range(0, len(y) - batch + 1, batch)]


def pytorch_trainer(model, onnx_path, opt, lr, threads):
    import torch
    sys.path.insert(0, HERE)
    from compare_pytorch import MODELS, load_onnx_weights, torch_optimizer
    torch.set_num_threads(threads)
    net = MODELS[model]()
    load_onnx_weights(net, onnx_path)
    net.train()
    optimizer = torch_optimizer(opt, net.parameters(), lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(xb, yb):
        optimizer.zero_grad()
        logits = net(torch.from_numpy(xb))
        loss = loss_fn(logits, torch.from_numpy(yb))
        loss.backward()
        optimizer.step()
        return loss.item(), int((logits.detach().argmax(1).numpy() == yb).sum())
    return step, {"torch": torch.__version__, "threads": threads}


def tensorflow_trainer(onnx_path, opt, lr, threads):
    import keras
    import tensorflow as tf
    sys.path.insert(0, HERE)
    import tf_peer
    settings = tf_peer.configure(threads)
    net = tf_peer.keras_from_onnx(onnx_path)
    optimizer = tf_peer.optimizer(opt, lr)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def tf_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = net(xb, training=True)
            loss = loss_fn(yb, logits)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))
        return loss, logits

    def step(xb, yb):
        loss, logits = tf_step(tf.constant(tf_peer.nhwc(xb)), tf.constant(yb))
        return float(loss), int((np.argmax(logits.numpy(), 1) == yb).sum())
    return step, settings


def worker(argv):
    engine, model, onnx_path, data_dir, opt = argv[:5]
    lr, epochs, batch, threads = float(argv[5]), int(argv[6]), int(argv[7]), int(argv[8])
    x, y = read_cifar(data_dir, DATA[model])
    if engine == "pytorch":
        step, settings = pytorch_trainer(model, onnx_path, opt, lr, threads)
    elif engine == "tensorflow":
        step, settings = tensorflow_trainer(onnx_path, opt, lr, threads)
    else:
        raise SystemExit(f"seed000_table3_peers: engine '{engine}' (pytorch, tensorflow)")
    log = []
    for e, batches in enumerate(epochs_of(x, y, batch, epochs), 1):
        start, correct, seen, loss_sum = time.perf_counter(), 0, 0, 0.0
        for xb, yb in batches:
            loss, right = step(np.ascontiguousarray(xb), yb)
            correct, seen, loss_sum = correct + right, seen + len(yb), loss_sum + loss * len(yb)
        log.append({"epoch": e, "train_accuracy": correct / seen, "train_loss": loss_sum / seen,
                    "seconds": time.perf_counter() - start})
    print(json.dumps({"epochs": log, "images": int(len(y)), "settings": settings}))


def run_cell(args, onnx, model, engine, opt, lr):
    cmd = [args.python, os.path.abspath(__file__), "worker", engine, model, onnx, args.data, opt, str(lr),
           str(args.epochs), str(args.batch), str(args.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return {"status": "failed", "message": (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]}
    return {"status": "done", **json.loads(p.stdout.strip().splitlines()[-1])}


def key(model, engine, opt, lr):
    return f"{model}|{engine}|{opt}|{lr:g}"


def save(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def pct(v):
    return "" if v is None else f"{100 * v:.2f}"


def mosaic_rows(paths):
    """Mosaic's cells from the sweeps' JSON: (model, 'Mosaic BACKEND', opt, lr) -> accuracy by epoch."""
    rows = {}
    for p in filter(None, paths.split(",")):
        if not os.path.exists(p):
            continue
        for c in json.load(open(p))["cells"]:
            if c.get("status") != "done":
                continue
            acc = {e["epoch"]: e["train_accuracy"] for e in c["log"]["epochs"]}
            rows[(c["model"].removeprefix("zoo:"), "Mosaic " + c["backend"], c["optimizer"], float(c["lr"]))] = acc
    return rows


def markdown(doc, args):
    cols = [e for e in range(2, args.epochs + 1, 2)] or [args.epochs]
    rows = mosaic_rows(args.mosaic_json)
    framework = {v: k for k, v in NAMES.items()}  # a row's engine label -> the seed's framework key
    for c in doc["cells"].values():
        if c["status"] == "done":
            rows[(c["model"], NAMES[c["engine"]], c["optimizer"], c["lr"])] = {
                e["epoch"]: e["train_accuracy"] for e in c["epochs"]}
    out = [f"Train accuracy (%) by epoch of {doc['images']} images at batch {args.batch}, {args.threads} threads; "
           "the seed's columns are its accuracy after epochs 5 and 10 of CIFAR's 50,000 (blank: a cell the "
           "seed left blank, one that did not train; - : the seed has no such row).", ""]
    for model in args.models.split(","):
        out += [f"| {model} optimizer | lr | engine | " + " | ".join(f"epoch {e}" for e in cols) +
                " | seed epoch 5 | seed epoch 10 |",
                "|---|---|---|" + "---|" * len(cols) + "---|---|"]
        for opt in args.optimizers.split(","):
            for lr in map(float, args.lrs.split(",")):
                for (m, engine, o, l), acc in sorted(rows.items()):
                    if (m, o, l) != (model, opt, lr):
                        continue
                    fw = framework.get(engine)
                    seed = SEED.get((model, fw, opt), {}).get(lr, "-") if fw else "-"
                    s5, s10 = ("-", "-") if seed == "-" else ("", "") if seed is None else (pct(seed[0]), pct(seed[1]))
                    out.append(f"| {opt} | {lr:g} | {engine} | " + " | ".join(pct(acc.get(e)) for e in cols) +
                               f" | {s5} | {s10} |")
        out.append("")
    failed = [f"{c['model']} {c['engine']} {c['optimizer']} {c['lr']:g}: {c['message']}"
              for c in doc["cells"].values() if c["status"] != "done"]
    out += [f"Failed: {f}" for f in failed]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        if len(sys.argv) != 11:
            raise SystemExit(__doc__)
        return worker(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the directory bench/fmnist_as_cifar.py wrote (cifar10/, cifar100/)")
    ap.add_argument("--models", default="alexnet-cifar,vgg16-cifar")
    ap.add_argument("--engines", default="pytorch,tensorflow")
    ap.add_argument("--optimizers", default="sgd,adam,rmsprop")
    ap.add_argument("--lrs", default="0.01,0.001,0.0001")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--python", default=sys.executable, help="the interpreter with torch and tensorflow")
    ap.add_argument("--mosaic", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--mosaic-json", default="docs/seeds/table3_alexnet_sweep.json,docs/seeds/table3_vgg16_sweep.json")
    ap.add_argument("--json", default="table3_peers.json")
    ap.add_argument("--markdown")
    ap.add_argument("--table-only", action="store_true", help="write --markdown from --json, run nothing")
    args = ap.parse_args()
    for m in args.models.split(","):
        if m not in DATA:
            raise SystemExit(f"seed000_table3_peers: model '{m}' (alexnet-cifar, vgg16-cifar)")
    check = Mt19937_64()
    for _ in range(9999):
        check()
    if check() != 9981545732273789042:
        raise SystemExit("seed000_table3_peers: the mt19937_64 here is not the standard's")
    doc = json.load(open(args.json)) if os.path.exists(args.json) else {"cells": {}}
    settings = {"epochs": args.epochs, "batch": args.batch, "threads": args.threads, "order": "mosaic, seed 0",
                "data": os.path.basename(os.path.normpath(args.data))}
    if doc.get("settings", settings) != settings:
        raise SystemExit(f"seed000_table3_peers: {args.json} holds a run of {doc['settings']}, not {settings}")
    doc["settings"] = settings
    with tempfile.TemporaryDirectory() as tmp:
        for model in [] if args.table_only else args.models.split(","):
            onnx = os.path.join(tmp, model + ".onnx")
            subprocess.run([args.mosaic, "export", model, "-o", onnx], check=True, stdout=subprocess.DEVNULL)
            for opt in args.optimizers.split(","):
                for lr in map(float, args.lrs.split(",")):
                    for engine in args.engines.split(","):
                        k = key(model, engine, opt, lr)
                        if doc["cells"].get(k, {}).get("status") == "done":
                            continue
                        t0 = time.time()
                        cell = run_cell(args, onnx, model, engine, opt, lr)
                        doc["cells"][k] = {"model": model, "engine": engine, "optimizer": opt, "lr": lr, **cell}
                        doc["images"] = cell.get("images", doc.get("images"))
                        save(args.json, doc)
                        last = cell["epochs"][-1]["train_accuracy"] if cell["status"] == "done" else cell["message"]
                        print(f"{k}: {last} ({time.time() - t0:.0f} s)", flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(doc, args))


if __name__ == "__main__":
    main()
