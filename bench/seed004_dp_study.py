#!/usr/bin/env python3
"""Seed 004's data-parallel study, redone: its two MNIST CNNs, trained for two epochs with
Adam, over workers (MPI ranks here), dataset size (the training set concatenated R times),
batch per worker, and the synchronisation (ring all-reduce against a parameter server),
recording the first and second epoch times as the seed does; beside them `mosaic simulate`'s
prediction for 1, 2 and 4 GPUs of the seed's kind.

Each cell is one `mpirun -np W(+1 server) mosaic train zoo:MODEL --data DATA --data-repeat R
--batch B --epochs 2 --optimizer adam --lr 0.001 --distributed MODE --json` (threads 1 per
rank; `--oversubscribe` where the ranks outnumber the cores, said in the table). The seed's
Adam has eps 1e-7 (Keras's default); Mosaic's built-in Adam has PyTorch's 1e-8, as the seed's
PyTorch notebook passes 1e-07 explicitly: a difference in the update, not in the time.
The seed trained on MNIST (60,000 images); this machine has Fashion-MNIST (Debian's
dataset-fashion-mnist: the same 60,000 28x28 grey images and 10 classes), labelled as such.
`all-reduce` here is Mosaic's `--distributed allreduce` (`--collective auto`: shared memory
on one node, the ring across nodes); `--collective ring` forces the ring.

The prediction: `mosaic simulate zoo:MODEL --batch B --ranks 1,2,4 --mode allreduce,ps
--network pcie3-gpu --target-images-per-s X`, X the rate one of the seed's K80s trained the
model at in the seed's own notebook log (second epoch of 60,000 images at batch 128:
small 3 s, large 15 s: 20,000 and 4,000 images/s).

Writes a Markdown table (stdout, --markdown) and every cell's record (--json, rewritten after
each cell, so a run cut short keeps what it measured; rerunning with the same --json skips
the cells it holds). --figures DIR draws, per model and mode, the second epoch's time and the
speed-up against the workers (one line per data size and batch) beside `mosaic simulate`'s
prediction, as the seed's figures do: DIR/STEM_MODEL_MODE.svg, STEM the JSON's name
(matplotlib, in /usr/bin/python3). --table-only redraws the table and figures from --json.

usage: bench/seed004_dp_study.py [--mosaic build/mosaic] [--models dp-mnist-small,dp-mnist-large]
          [--workers 1,2,4] [--repeats 1,4,8] [--batches 128,256,512] [--modes allreduce,ps]
          [--data fashion-mnist] [--backend onednn] [--steps-per-epoch S] [--json F] [--markdown F]
          [--figures DIR] [--table-only]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svg_figures  # noqa: E402

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
K80_IMAGES_PER_S = {"dp-mnist-small": 20000.0, "dp-mnist-large": 4000.0}  # the seed's notebook, 1 K80, batch 128
TRAIN_IMAGES = 60000


def key(c):
    return f"{c['model']}|{c['mode']}|w{c['workers']}|x{c['repeat']}|b{c['batch']}"


def run_cell(args, c):
    """One training job; its record (times, images/s) or the error."""
    ranks = c["workers"] + (1 if c["mode"].startswith("ps") else 0)
    over = ranks > (os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "train.json")
        cmd = ["mpirun", "-np", str(ranks)] + (["--oversubscribe"] if over else []) + [
            args.mosaic, "train", "zoo:" + c["model"], "--data", args.data, "--data-repeat", str(c["repeat"]),
            "--batch", str(c["batch"]), "--epochs", "2", "--optimizer", "adam", "--lr", "0.001", "--threads", "1",
            "--backend", args.backend, "--no-eval", "--no-db", "--distributed", c["mode"], "--json", out]
        if args.steps_per_epoch:
            cmd[cmd.index("--epochs"):cmd.index("--epochs")] = ["--steps-per-epoch", str(args.steps_per_epoch)]
        t0 = time.time()
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1", MOSAIC_PROGRESS="0", **MPI_ENV))
        rec = dict(c, ranks=ranks, oversubscribed=over, wall_s=time.time() - t0, command=" ".join(cmd))
        if r.returncode:
            rec["error"] = (r.stdout.strip().splitlines() or [f"exit {r.returncode}"])[-1][:300]
            return rec
        d = json.load(open(out))["distributed"]
        rec.update(first_epoch_s=d["first_epoch_s"], second_epoch_s=d["second_epoch_s"],
                   images_per_s=d["images_per_s"], steps=d["steps"])
        return rec


def save(path, doc):
    """Rewritten whole after every cell, never left half written."""
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(path + ".tmp", path)


def simulate(args, model, batch, modes):
    """mosaic simulate's images/s for 1, 2 and 4 K80-like GPUs, {mode: {ranks: images/s}}."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        r = subprocess.run([args.mosaic, "simulate", "zoo:" + model, "--batch", str(batch), "--backend", args.backend,
                            "--ranks", "1,2,3,4,5", "--mode", ",".join(modes), "--network", "pcie3-gpu",
                            "--target-images-per-s", str(K80_IMAGES_PER_S[model]),
                            "--json", f.name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, MOSAIC_PROGRESS="0"))
        if r.returncode:
            return {"error": (r.stdout.strip().splitlines() or ["?"])[-1][:300]}
        doc = json.load(open(f.name))
    out = {}
    for p in doc.get("predictions", []):  # by workers (a parameter server's rank is not one)
        if "error" not in p and p.get("workers") in (1, 2, 4):
            out.setdefault(p["mode"], {})[str(p["workers"])] = p["images_per_s"]
    return out


def markdown(doc):
    epochs = "two epochs" + (f" cut to {doc['steps_per_epoch']} steps each (not whole epochs)"
                             if doc.get("steps_per_epoch") else "")
    lines = [f"Seed 004's study on this machine ({doc['cores']} cores; {doc['data']}, {epochs}, Adam lr 0.001, "
             f"threads 1 per rank, backend {doc['backend']}; `bench/seed004_dp_study.py`, {doc['date'][:10]}). "
             "Epoch times in seconds; images/s over both epochs' steps; speed-up = images/s on W workers / on 1, "
             "same model, data, batch and mode.", "",
             "| model | mode | data | batch / worker | workers | first epoch s | second epoch s | images/s | speed-up |",
             "|---|---|---|---|---|---|---|---|---|"]
    cells = doc["cells"]
    for c in cells:
        if "error" in c:
            lines.append(f"| {c['model']} | {c['mode']} | x{c['repeat']} | {c['batch']} | {c['workers']} | "
                         f"failed: {c['error'][:80]} | | | |")
            continue
        one = next((o for o in cells if o["model"] == c["model"] and o["mode"] == c["mode"] and
                    o["repeat"] == c["repeat"] and o["batch"] == c["batch"] and o["workers"] == 1 and "error" not in o), None)
        speed = f"{c['images_per_s'] / one['images_per_s']:.2f}x" if one else "-"
        w = f"{c['workers']}" + (" (oversubscribed)" if c.get("oversubscribed") else "")
        lines.append(f"| {c['model']} | {c['mode']} | x{c['repeat']} | {c['batch']} | {w} | {c['first_epoch_s']:.2f} | "
                     f"{c['second_epoch_s']:.2f} | {c['images_per_s']:.0f} | {speed} |")
    if doc.get("simulated"):
        lines += ["", "`mosaic simulate`'s prediction for the seed's GPUs (one rank's compute scaled to the K80's rate "
                  "in the seed's notebook log, GPUs of one node over PCIe 3.0: `--network pcie3-gpu`), images/s "
                  "and speed-up over one GPU:", "",
                  "| model | batch / GPU | mode | 1 GPU | 2 GPUs | 4 GPUs |", "|---|---|---|---|---|---|"]
        for s in doc["simulated"]:
            if "error" in s["prediction"]:
                lines.append(f"| {s['model']} | {s['batch']} | - | failed: {s['prediction']['error'][:80]} | | |")
                continue
            for mode, by in s["prediction"].items():
                base = by.get("1")
                cells_ = [f"{by[r]:.0f}" + (f" ({by[r] / base:.2f}x)" if base and r != "1" else "")
                          if r in by else "-" for r in ("1", "2", "4")]
                lines.append(f"| {s['model']} | {s['batch']} | {mode} | " + " | ".join(cells_) + " |")
    return "\n".join(lines) + "\n"


FIGURE_CODE = r"""
for f in spec:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    # Colour: the batch; line: the data size (x1 solid, x4 dashed, x8 dash-dot).
    for name, xs, ys, c, ls in f["epoch"]:
        left.plot(xs, ys, ls, color="C%d" % c, marker="o", label=name)
    for name, xs, ys, c, ls in f["speedup"]:
        right.plot(xs, ys, ls, color="C%d" % c, marker="o", label=name)
    for name, xs, ys, c in f["simulated"]:
        right.plot(xs, ys, ":", color="C%d" % c, marker="s", alpha=0.6, label=name)
    right.plot([1, 4], [1, 4], color="grey", lw=0.8, label="linear")
    for a in (left, right):
        a.set_xticks([1, 2, 4])
        a.set_xlabel("workers" + (" (MPI ranks on " + str(f["cores"]) + " cores)"))
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    left.set_ylabel("second epoch, s")
    right.set_ylabel("speed-up over one worker (images/s)")
    left.set_title(f["title"], fontsize=10)
    right.set_title("speed-up, beside mosaic simulate's for the seed's K80s", fontsize=10)
    fig.tight_layout()
    fig.savefig(f["path"], metadata={"Date": None})
    plt.close(fig)
"""


def figures(doc, json_path, out_dir):
    """One SVG per model and mode (the seed's figures: epoch time and speed-up against workers)."""
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(json_path))[0]
    ok = [c for c in doc["cells"] if "error" not in c]
    spec = []
    for model, mode in sorted({(c["model"], c["mode"]) for c in ok}):
        epoch, speedup = [], []
        mine = [c for c in ok if (c["model"], c["mode"]) == (model, mode)]
        batches = sorted({c["batch"] for c in mine})
        line = {1: "-", 4: "--", 8: "-."}
        for repeat, batch in sorted({(c["repeat"], c["batch"]) for c in mine}):
            style = [batches.index(batch), line.get(repeat, ":")]
            pts = sorted(((c["workers"], c) for c in mine if (c["repeat"], c["batch"]) == (repeat, batch)),
                         key=lambda wc: wc[0])
            name = f"data x{repeat}, batch {batch}"
            epoch.append([name, [w for w, _ in pts], [c["second_epoch_s"] for _, c in pts]] + style)
            if pts[0][0] == 1:
                base = pts[0][1]["images_per_s"]
                speedup.append([name, [w for w, _ in pts], [c["images_per_s"] / base for _, c in pts]] + style)
        simulated = []
        for s in doc.get("simulated", []):
            by = s["prediction"].get(mode) if s["model"] == model else None
            if by and "1" in by and s["batch"] in batches:
                ws = sorted(int(w) for w in by)
                simulated.append([f"simulated K80s, batch {s['batch']}", ws, [by[str(w)] / by["1"] for w in ws],
                                  batches.index(s["batch"])])
        cut = f", epochs of {doc['steps_per_epoch']} steps" if doc.get("steps_per_epoch") else ""
        spec.append({"title": f"{model}, {mode}: second epoch time{cut}", "epoch": epoch, "speedup": speedup,
                     "simulated": simulated, "cores": doc["cores"],
                     "path": os.path.join(out_dir, f"{stem}_{model}_{mode}.svg")})
    svg_figures.draw(FIGURE_CODE, spec)
    return [f["path"] for f in spec]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--models", default="dp-mnist-small,dp-mnist-large")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--repeats", default="1,4,8")
    ap.add_argument("--batches", default="128,256,512")
    ap.add_argument("--modes", default="allreduce,ps")
    ap.add_argument("--data", default="fashion-mnist")
    ap.add_argument("--backend", default="onednn")
    ap.add_argument("--steps-per-epoch", type=int, default=0, help="cut epochs short (a quick check; not the study)")
    ap.add_argument("--no-simulate", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    ap.add_argument("--figures", default="", help="directory for the SVG figures")
    ap.add_argument("--table-only", action="store_true", help="the table and figures of --json; nothing run")
    args = ap.parse_args()
    if args.table_only:
        if not args.json:
            sys.exit("seed004_dp_study: --table-only reads --json")
        return write_outputs(args, json.load(open(args.json)))
    doc = {"schema": "mosaic.seed004/1", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "cores": os.cpu_count(), "data": args.data, "backend": args.backend, "steps_per_epoch": args.steps_per_epoch,
           "cells": [], "simulated": []}
    if args.json and os.path.exists(args.json):
        old = json.load(open(args.json))
        if old.get("steps_per_epoch", 0) != args.steps_per_epoch:
            sys.exit(f"seed004_dp_study: {args.json} holds cells of --steps-per-epoch {old.get('steps_per_epoch', 0)}, "
                     f"not {args.steps_per_epoch}: give another --json")
        doc["cells"] = [c for c in old.get("cells", []) if "error" not in c]
    done = {key(c) for c in doc["cells"]}
    for model in args.models.split(","):
        if model not in K80_IMAGES_PER_S:
            sys.exit(f"seed004_dp_study: unknown model {model} (dp-mnist-small, dp-mnist-large)")
        for mode in args.modes.split(","):
            for repeat in map(int, args.repeats.split(",")):
                for batch in map(int, args.batches.split(",")):
                    for workers in map(int, args.workers.split(",")):
                        c = {"model": model, "mode": mode, "repeat": repeat, "batch": batch, "workers": workers}
                        if key(c) in done:
                            continue
                        print(f"{key(c)} ...", file=sys.stderr, flush=True)
                        rec = run_cell(args, c)
                        print(json.dumps({k: rec.get(k) for k in ("first_epoch_s", "second_epoch_s", "images_per_s",
                                                                   "error") if k in rec}), file=sys.stderr, flush=True)
                        doc["cells"].append(rec)
                        if args.json:
                            save(args.json, doc)
    models = list(K80_IMAGES_PER_S)  # one order whatever ran when: model, mode, data, batch, workers
    doc["cells"].sort(key=lambda c: (models.index(c["model"]), c["mode"], c["repeat"], c["batch"], c["workers"]))
    if not args.no_simulate:
        # For every model and batch the JSON holds (a run of some cells keeps the others' predictions).
        pairs = {(c["model"], c["batch"]) for c in doc["cells"]}
        for model, batch in sorted(pairs, key=lambda mb: (models.index(mb[0]), mb[1])):
            modes = sorted({c["mode"] for c in doc["cells"] if c["model"] == model})
            doc["simulated"].append({"model": model, "batch": batch, "prediction": simulate(args, model, batch, modes)})
    if args.json:
        save(args.json, doc)
    return write_outputs(args, doc)


def write_outputs(args, doc):
    table = markdown(doc)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    if args.figures:
        for path in figures(doc, args.json or "dp_study.json", args.figures):
            print(f"wrote {path}", file=sys.stderr)
    return 1 if any("error" in c for c in doc["cells"]) else 0


if __name__ == "__main__":
    sys.exit(main())
