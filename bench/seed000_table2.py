#!/usr/bin/env python3
"""Seed 000's Table 2 redone: training throughput and epoch time against the batch size
(250 to 5000), AlexNet-CIFAR and VGG16-CIFAR, SGD, Adam and RMSProp, with TensorFlow and
PyTorch in the same table as Mosaic's backends.

Every cell is one fresh process per engine: `mosaic bench MODEL --mode training` for
Mosaic's backends, bench/compare_pytorch.py's PyTorch worker and bench/tf_peer.py's Keras
model for the peers, all from the weights of the ONNX file Mosaic trains, at the same thread
count. Before the first batch of each model and optimizer PyTorch and TensorFlow take three
steps on one fixed batch and their losses must agree (relative 1e-3), as in
compare_pytorch.py; the table says where they did not. The engines of one cell run back to
back, so the machine's drift falls on all of them alike.

The seed ran whole CIFAR epochs on a GPU; two cores take minutes per batch of 5000, so each
cell times one warm-up step and then ceil(--images / batch) steps, at most --iterations
(the median step's images/s), and the epoch time is that rate's time for CIFAR-10's 50,000
training images: a derived figure, labelled as such. The data are random images of CIFAR's
shape (the seed's "synthetic data" group), labels of the model's classes.

The JSON (--json) is rewritten after every cell: a run cut short keeps what it measured, and
rerunning with the same --json skips the cells it holds (resume). --markdown writes the table
with the seed's published figures beside ours; --figures DIR draws throughput against batch
(matplotlib, run from /usr/bin/python3 when this interpreter has none).

usage: bench/seed000_table2.py [--models alexnet-cifar,vgg16-cifar] [--batches 250,500,1000,2000,5000]
          [--optimizers sgd,adam,rmsprop] [--engines onednn,im2col,pytorch,tensorflow]
          [--tensorflow PYTHON] [--json F] [--markdown F] [--figures DIR] [--table-only]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svg_figures  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
LR = {"sgd": 0.01, "adam": 0.001, "rmsprop": 0.001}  # the seed's rates (Table 3's best for each)
EPOCH_IMAGES = 50000  # CIFAR-10's training set
MOSAIC_ENGINES = ("onednn", "im2col")
LABEL = {"onednn": "Mosaic onednn", "im2col": "Mosaic im2col", "pytorch": "PyTorch", "tensorflow": "TensorFlow"}

# Seed 000's Table 2 (GPU, whole epochs): images/s per model, framework, optimizer and batch.
SEED = {
    ("alexnet-cifar", "tensorflow", "sgd"): [7322, 8193, 9451, 9960, 10255],
    ("alexnet-cifar", "tensorflow", "adam"): [5242, 6693, 8387, 9328, 9799],
    ("alexnet-cifar", "tensorflow", "rmsprop"): [5744, 7129, 8692, 9471, 10116],
    ("alexnet-cifar", "pytorch", "sgd"): [7120, 7801, 8803, 9210, 9707],
    ("alexnet-cifar", "pytorch", "adam"): [5662, 6810, 8170, 8880, 9558],
    ("alexnet-cifar", "pytorch", "rmsprop"): [6093, 7154, 8367, 9045, 9642],
    ("vgg16-cifar", "tensorflow", "sgd"): [6441, 7020, 7525, 7770, 7616],
    ("vgg16-cifar", "tensorflow", "adam"): [6073, 6826, 7366, 7728, 7582],
    ("vgg16-cifar", "tensorflow", "rmsprop"): [6199, 6929, 7423, 7723, 7561],
    ("vgg16-cifar", "pytorch", "sgd"): [4201, 4579, 4845, 5019, 5192],
    ("vgg16-cifar", "pytorch", "adam"): [3420, 4546, 4835, 5005, 5178],
    ("vgg16-cifar", "pytorch", "rmsprop"): [4155, 4561, 4851, 5034, 5192],
}
SEED_BATCHES = [250, 500, 1000, 2000, 5000]


def seed_rate(model, engine, opt, batch):
    rates = SEED.get((model, engine, opt))
    return rates[SEED_BATCHES.index(batch)] if rates and batch in SEED_BATCHES else None


def key(model, opt, batch, engine):
    return f"{model}|{opt}|{batch}|{engine}"


def steps_for(args, batch):
    return max(1, min(args.iterations, math.ceil(args.images / batch)))


def run_json(cmd, env=None):
    """Runs cmd; the last stdout line as JSON, or {"error": ...} with stderr's last line."""
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        err = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:300]
        return {"error": err, "command": " ".join(cmd)}
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.time() - t0
    return out


def time_cell(args, model, path, opt, batch, engine, check):
    lr, steps = LR[opt], steps_for(args, batch)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MOSAIC_PROGRESS="0")
    if engine in MOSAIC_ENGINES:
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            cmd = [args.mosaic, "bench", path, "--mode", "training", "--batch", str(batch), "--backends", engine,
                   "--threads", str(args.threads), "--warmup", "1", "--iterations", str(steps), "--max-seconds",
                   "100000", "--no-check", "--optimizer", opt, "--lr", str(lr), "--json", tmp.name]
            t0 = time.time()
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            if r.returncode:
                return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1][:300], "command": " ".join(cmd)}
            s = json.load(open(tmp.name))["runs"][0]["summary"]
            return {"images_per_s": s["images_per_s"], "median_ms": s["median_ms"], "measured": steps,
                    "wall_s": time.time() - t0, "command": " ".join(cmd)}
    if engine == "pytorch":
        cmd = [args.python, os.path.join(HERE, "compare_pytorch.py"), "--pytorch-worker", model, str(batch),
               "--threads", str(args.threads), "--warmup", "1", "--iterations", str(steps), "--max-seconds",
               "100000", "--mode", "training", "--optimizers", opt, "--lr", str(lr), "--onnx", path,
               "--check-steps", "3" if check else "0"]
        return run_json(cmd, env)
    cmd = [args.tensorflow, os.path.join(HERE, "tf_peer.py"), "train", path, str(batch), str(args.threads), opt,
           str(lr), "1", str(steps), "100000", "3" if check else "0"]
    return run_json(cmd, env)


def save(args, doc):
    tmp = args.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, args.json)


def versions(args):
    out = {}
    for name, py, mod in (("torch", args.python, "torch"), ("tensorflow", args.tensorflow, "tensorflow")):
        r = subprocess.run([py, "-c", f"import {mod}; print({mod}.__version__)"], capture_output=True, text=True)
        out[name] = r.stdout.strip() or "unavailable"
    out["mosaic"] = subprocess.run([args.mosaic, "--version"], capture_output=True, text=True).stdout.strip().split()[-1]
    return out


def measure(args, doc):
    engines = args.engines.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            path = os.path.join(tmp, model + ".onnx")
            subprocess.run([args.mosaic, "export", model, "-o", path], check=True, stdout=subprocess.DEVNULL)
            for opt in args.optimizers.split(","):
                batches = [int(b) for b in (args.batches if opt == "sgd" else args.other_batches).split(",")]
                for i, batch in enumerate(batches):
                    for engine in engines:
                        k = key(model, opt, batch, engine)
                        if k in doc["cells"] and "error" not in doc["cells"][k]:
                            continue
                        rec = time_cell(args, model, path, opt, batch, engine, check=(i == 0))
                        rec.update(model=model, optimizer=opt, lr=LR[opt], batch=batch, engine=engine,
                                   date=time.strftime("%Y-%m-%d %H:%M"))
                        doc["cells"][k] = rec
                        save(args, doc)
                        rate = f"{rec['images_per_s']:.1f} images/s" if "images_per_s" in rec else rec["error"]
                        print(f"{model} {opt} batch {batch} {engine}: {rate}", flush=True)


def cell(doc, model, opt, batch, engine):
    return doc["cells"].get(key(model, opt, batch, engine), {})


def rows_of(doc):
    seen = {}
    for c in doc["cells"].values():
        seen.setdefault((c["model"], c["optimizer"]), set()).add(c["batch"])
    order = {"sgd": 0, "adam": 1, "rmsprop": 2}
    for model, opt in sorted(seen, key=lambda mo: (mo[0], order.get(mo[1], 9))):
        for batch in sorted(seen[(model, opt)]):
            yield model, opt, batch


def losses_agree(doc, model, opt):
    pt = tf = None
    for c in doc["cells"].values():
        if c["model"] == model and c["optimizer"] == opt and c.get("check_losses"):
            if c["engine"] == "pytorch":
                pt = c["check_losses"]
            elif c["engine"] == "tensorflow":
                tf = c["check_losses"]
    if pt is None or tf is None:
        return "-"
    ok = len(pt) == len(tf) and all(abs(a - b) <= 1e-3 * max(abs(a), abs(b), 1e-6) for a, b in zip(pt, tf))
    return "yes" if ok else "NO (" + ", ".join(f"{a:.5g}/{b:.5g}" for a, b in zip(pt, tf)) + ")"


def markdown(doc):
    s = doc["settings"]
    lines = [f"Training images/s of the median step (one warm-up step, then ceil({s['images']} / batch) steps, at "
             f"most {s['iterations']}), {s['threads']} threads, random CIFAR-shaped data; epoch = {EPOCH_IMAGES:,} "
             f"images at that rate (derived). {s['date']}; mosaic {s['versions']['mosaic']}, torch "
             f"{s['versions']['torch']}, tensorflow {s['versions']['tensorflow']}. The seed's columns: its Table 2 "
             "(GPU, whole epochs).", "",
             "| model | optimizer | batch | Mosaic onednn | Mosaic im2col | PyTorch | TensorFlow | epoch s (best "
             "Mosaic / PyTorch / TensorFlow) | best Mosaic / PyTorch | best Mosaic / TensorFlow | TensorFlow / PyTorch "
             "| seed: TensorFlow / PyTorch images/s | seed: TensorFlow / PyTorch | losses PyTorch = TensorFlow |",
             "|" + "---|" * 14]
    for model, opt, batch in rows_of(doc):
        r = {e: cell(doc, model, opt, batch, e).get("images_per_s") for e in LABEL}
        errors = {e: cell(doc, model, opt, batch, e).get("error") for e in LABEL}
        fmt = [f"{r[e]:.1f}" if r[e] else ("failed" if errors[e] else "-") for e in LABEL]
        mosaic = max([r[e] for e in MOSAIC_ENGINES if r[e]] or [0])
        epoch = " / ".join(f"{EPOCH_IMAGES / x:.0f}" if x else "-" for x in (mosaic, r["pytorch"], r["tensorflow"]))
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "-"  # noqa: E731
        st, sp = seed_rate(model, "tensorflow", opt, batch), seed_rate(model, "pytorch", opt, batch)
        lines.append(f"| {model} | {opt} | {batch} | " + " | ".join(fmt) + f" | {epoch} | {ratio(mosaic, r['pytorch'])} | "
                     f"{ratio(mosaic, r['tensorflow'])} | {ratio(r['tensorflow'], r['pytorch'])} | "
                     f"{st or '-'} / {sp or '-'} | {ratio(st, sp)} | {losses_agree(doc, model, opt)} |")
    failed = [c for c in doc["cells"].values() if "error" in c]
    for c in failed:
        lines.append(f"\n{c['model']} {c['optimizer']} batch {c['batch']} on {c['engine']} failed: {c['error']}")
    return "\n".join(lines) + "\n"


FIGURE_CODE = r"""
for fig_spec in spec:
    fig, (ax, rel) = plt.subplots(1, 2, figsize=(11, 4))
    for name, xs, ys, style in fig_spec["series"]:
        ax.plot(xs, ys, style, marker="o", label=name)
        rel.plot(xs, [y / ys[0] for y in ys], style, marker="o", label=name)
    for name, xs, ys in fig_spec["seed"]:
        rel.plot(xs, [y / ys[0] for y in ys], ":", marker="s", label=name)
    ticks = sorted({x for _, xs, _, _ in fig_spec["series"] for x in xs})
    for a in (ax, rel):
        a.set_xscale("log", base=2)
        a.set_xticks(ticks, [str(t) for t in ticks])
        a.minorticks_off()
        a.set_xlabel("batch size")
        a.grid(alpha=0.3)
    ax.set_ylabel("training images/s (this machine)")
    rel.set_ylabel("images/s relative to batch 250")
    ax.set_title(fig_spec["title"], fontsize=10)
    rel.set_title("the same, relative, beside the seed's GPU figures", fontsize=10)
    rel.legend(fontsize=7)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(fig_spec["path"], metadata={"Date": None})
    plt.close(fig)
"""


def figures(doc, out_dir):
    """One SVG per model and optimizer: throughput against batch per engine, and relative to the
    smallest batch beside the seed's frameworks (the seed's Figures 1-3)."""
    os.makedirs(out_dir, exist_ok=True)
    spec = []
    for model in sorted({c["model"] for c in doc["cells"].values()}):
        for opt in ("sgd", "adam", "rmsprop"):
            series = []
            for engine, style in zip(LABEL, ("-", "-", "--", "--")):
                pts = sorted((c["batch"], c["images_per_s"]) for c in doc["cells"].values() if c["model"] == model
                             and c["optimizer"] == opt and c["engine"] == engine and "images_per_s" in c)
                if len(pts) >= 2:
                    series.append([LABEL[engine], [p[0] for p in pts], [p[1] for p in pts], style])
            if not series:
                continue
            seed = [[f"seed: {LABEL[e]} (GPU)", SEED_BATCHES, SEED[(model, e, opt)]] for e in ("pytorch", "tensorflow")
                    if (model, e, opt) in SEED]
            spec.append({"title": f"{model}, {opt} lr {LR[opt]}: training throughput vs batch", "series": series,
                         "seed": seed, "path": os.path.join(out_dir, f"table2_{model}_{opt}.svg")})
    svg_figures.draw(FIGURE_CODE, spec)
    return [s["path"] for s in spec]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--python", default=sys.executable, help="an interpreter with torch (PyTorch 2: .peers-venv)")
    ap.add_argument("--tensorflow", default=sys.executable, help="an interpreter with tensorflow-cpu")
    ap.add_argument("--models", default="alexnet-cifar,vgg16-cifar")
    ap.add_argument("--batches", default="250,500,1000,2000,5000", help="SGD's batches")
    ap.add_argument("--other-batches", default="250,1000", help="Adam's and RMSProp's batches")
    ap.add_argument("--optimizers", default="sgd,adam,rmsprop")
    ap.add_argument("--engines", default="onednn,im2col,pytorch,tensorflow")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--images", type=int, default=2000, help="images per cell to time (after one warm-up step)")
    ap.add_argument("--iterations", type=int, default=3, help="the most measured steps per cell")
    ap.add_argument("--json", default="docs/seeds/table2.json")
    ap.add_argument("--markdown", default="")
    ap.add_argument("--figures", default="")
    ap.add_argument("--table-only", action="store_true", help="measure nothing: the table and figures from --json")
    args = ap.parse_args()
    unknown = [e for e in args.engines.split(",") if e not in LABEL] + \
        [o for o in args.optimizers.split(",") if o not in LR]
    if unknown:
        sys.exit(f"seed000_table2: unknown engines or optimizers {unknown}")
    doc = {"schema": "mosaic.seed000-table2/1", "cells": {}}
    if os.path.exists(args.json):
        doc = json.load(open(args.json))
    if not args.table_only:
        doc["settings"] = {"threads": args.threads, "images": args.images, "iterations": args.iterations,
                           "date": time.strftime("%Y-%m-%d"), "versions": versions(args)}
        measure(args, doc)
        save(args, doc)
    table = markdown(doc)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.figures:
        for p in figures(doc, args.figures):
            print("figure:", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
