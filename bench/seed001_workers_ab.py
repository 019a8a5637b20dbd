#!/usr/bin/env python3
"""Seed 001's speed-up, one worker against two, measured in alternation: ROUNDS times, one
`mpirun -np 1` training run and then one `mpirun -np 2` run of the same cell (the command a
sweep's cell runs: `mosaic train MODEL --distributed allreduce`, one thread per rank, epoch 1 a
warm-up and the rest measured), so that this VM's drift, which moves a whole sweep's cells
by 15-30%, falls on both worker counts alike. Prints, and writes as JSON (--json), each run's
epoch times and steady rate (the mean over epochs 2.., as the sweep's speed-up table takes it)
and each round's speed-up.

usage: bench/seed001_workers_ab.py [--model zoo:bert-base] [--batch 35]
          [--data synthetic-tokens:256,128,30521] [--objective masked-lm] [--optimizer adam]
          [--lr 0.0001] [--epochs 4] [--steps-per-epoch 1] [--rounds 3] [--json F]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1",
           "MOSAIC_PROGRESS": "0"}


def run(args, ranks):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "train.json")
        cmd = ["mpirun", "-np", str(ranks), args.mosaic, "train", args.model, "--data", args.data, "--backend",
               args.backend, "--optimizer", args.optimizer, "--lr", str(args.lr), "--batch", str(args.batch),
               "--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps_per_epoch), "--threads", "1",
               "--no-eval", "--no-db", "--distributed", "allreduce", "--json", out]
        if args.objective:
            cmd[cmd.index("--backend"):cmd.index("--backend")] = ["--objective", args.objective]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           env=dict(os.environ, **MPI_ENV))
        if r.returncode:
            sys.exit(f"seed001_workers_ab: {' '.join(cmd)} failed: {(r.stdout.strip().splitlines() or ['?'])[-1]}")
        epochs = json.load(open(out))["epochs"]
    rates = [e["images_per_s"] for e in epochs[1:]] or [epochs[0]["images_per_s"]]
    return {"ranks": ranks, "epoch_s": [e["seconds"] for e in epochs], "steady_per_s": statistics.mean(rates)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--model", default="zoo:bert-base")
    ap.add_argument("--batch", type=int, default=35)
    ap.add_argument("--data", default="synthetic-tokens:256,128,30521")
    ap.add_argument("--objective", default="masked-lm", help="token data only ('' for images)")
    ap.add_argument("--backend", default="onednn")
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--lr", type=float, default=0.0001)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--steps-per-epoch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    doc = {"schema": "mosaic.workers-ab/1", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "cores": os.cpu_count(), "settings": {k: v for k, v in vars(args).items() if k not in ("json", "mosaic")},
           "rounds": []}
    for i in range(1, args.rounds + 1):
        one, two = run(args, 1), run(args, 2)
        doc["rounds"].append({"one": one, "two": two, "speedup": two["steady_per_s"] / one["steady_per_s"]})
        print(f"round {i}: 1 worker {one['steady_per_s']:.3g}/s, 2 workers {two['steady_per_s']:.3g}/s, "
              f"{doc['rounds'][-1]['speedup']:.2f}x", flush=True)
        if args.json:
            with open(args.json + ".tmp", "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(args.json + ".tmp", args.json)
    s = [r["speedup"] for r in doc["rounds"]]
    print(f"speed-up: median {statistics.median(s):.2f}x, range {min(s):.2f}-{max(s):.2f}x over {len(s)} rounds")


if __name__ == "__main__":
    main()
