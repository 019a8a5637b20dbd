#!/usr/bin/python3
"""Does asynchronous training converge? Fashion-MNIST test accuracy after the same epochs.

Runs `mosaic train` on Fashion-MNIST with 2 workers (per-worker batch B) in the synchronous
modes (`allreduce` on 2 ranks, `ps` on 2 workers + 1 server) and the asynchronous one
(`ps-async`, 2 workers + 1 server), plus `avg` (model averaging every K steps), for E epochs
each, and prints the test accuracy after every epoch, the final gap to synchronous
all-reduce in percentage points, and ps-async's staleness histogram. Accuracy does not
depend on timing except through ps-async's interleaving, so the machine may be busy.

usage: bench/distributed_convergence.py [--mosaic build/mosaic] [--epochs 2] [--batch 32]
                                        [--lr 0.05] [--sync-every 8] [--seeds 1,2]
                                        [--modes allreduce,ps,ps-async,avg] [--json F]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}


def run(args, mode, seed):
    ranks = 3 if mode.startswith("ps") else 2
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.json")
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none", args.mosaic, "train",
               "zoo:fmnist-cnn", "--data", "fashion-mnist", "--batch", str(args.batch), "--epochs", str(args.epochs),
               "--lr", str(args.lr), "--threads", "1", "--seed", str(seed), "--distributed", mode, "--no-db",
               "--json", out]
        if mode == "avg":
            cmd += ["--sync-every", str(args.sync_every)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, **ENV))
        with open(out) as f:
            log = json.load(f)
    return {"test_accuracy": [e["test_accuracy"] for e in log["epochs"]],
            "staleness": log["distributed"].get("staleness")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--sync-every", type=int, default=8)
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--modes", default="allreduce,ps,ps-async,avg",
                    help="comma-separated; allreduce, the reference of the gaps, is always run")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    args.mosaic = os.path.abspath(args.mosaic)
    modes = ["allreduce"] + [m for m in args.modes.split(",") if m and m != "allreduce"]
    for m in modes:
        if m not in ("allreduce", "ps", "ps-async", "avg"):
            ap.error(f"unknown mode {m!r}")
    others = modes[1:]
    print(f"fmnist-cnn on Fashion-MNIST, 2 workers x batch {args.batch}, SGD lr {args.lr}, {args.epochs} epochs; "
          f"avg every {args.sync_every} steps\n")
    print("| seed | " + " | ".join(f"{m} test acc" for m in modes) + " | " +
          " | ".join(f"{m} - allreduce (pp)" for m in others) + " | ps-async staleness |")
    print("|" + "---|" * (2 * len(modes) + 1))
    rows = []
    for seed in map(int, args.seeds.split(",")):
        r = {m: run(args, m, seed) for m in modes}
        final = {m: r[m]["test_accuracy"][-1] for m in modes}
        hist = r["ps-async"]["staleness"] if "ps-async" in r else []
        hist_text = ", ".join(f"{i}: {n}" for i, n in enumerate(hist) if n) or "-"
        print(f"| {seed} | " + " | ".join(f"{final[m]:.4f}" for m in modes) + " | " +
              " | ".join(f"{100 * (final[m] - final['allreduce']):+.2f}" for m in others) + f" | {hist_text} |",
              flush=True)
        rows.append({"seed": seed, "runs": r})
    # The gap after every epoch: how it evolves as training converges.
    print("\ngap to allreduce after each epoch (pp), per seed\n")
    print("| mode | seed | " + " | ".join(f"epoch {e + 1}" for e in range(args.epochs)) + " |")
    print("|" + "---|" * (args.epochs + 2))
    for m in others:
        for row in rows:
            ref, acc = row["runs"]["allreduce"]["test_accuracy"], row["runs"][m]["test_accuracy"]
            print(f"| {m} | {row['seed']} | " + " | ".join(f"{100 * (a - b):+.2f}" for a, b in zip(acc, ref)) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
