#!/usr/bin/python3
"""Data-parallel scaling on this machine: Mosaic 1 vs N ranks, side by side with PyTorch DDP.

For each model, in one run: Mosaic `train --distributed allreduce` under `mpirun -np 1` and
`-np N` with each collective (`--collective shm`, the default on one machine, and `ring`),
the blocking variant at N (shm), and PyTorch 1.13 DistributedDataParallel (gloo) with 1
and N processes, the same architecture (built with torch.nn, bench/compare_pytorch.py), the
same per-process batch, 1 thread per process, plain SGD. Throughput is global images/s over
the measured epoch (Mosaic: epoch 2 of `--epochs 2 --steps-per-epoch S`, epoch 1 being the
warm-up; PyTorch: S steps after S warm-up steps). Speed-up is the data-parallel benchmark's:
throughput on N processes / throughput on 1. Prints a Markdown table; --json keeps it all.

With 2 ranks it also measures the machine's ceiling in the same run: two independent 1-rank
trainings started together, each pinned to its own core. Synchronous data-parallel steps at
the pace of the slower rank, so 2 x the slower one's throughput bounds it; the table gives
that ceiling as a speed-up and Mosaic's 2-rank throughput as a share of it (what the
machine's shared caches, memory bandwidth and unequal vCPUs cost is not Mosaic's).

With --repeats R every configuration runs R times, interleaved (one of each, then again),
and the table gives each repeat and then the medians: throughput of the median run per
configuration, and ratios as the median of each repeat's own ratios.

usage: bench/distributed_scaling.py [--mosaic build/mosaic] [--models vgg16-cifar,alexnet-cifar]
                                    [--ranks 2] [--batch 32] [--steps 8] [--backend onednn]
                                    [--repeats 1] [--no-ceiling] [--json F]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_pytorch import MODELS  # noqa: E402  (the same torch.nn architectures)

CLASSES = {"alexnet-cifar": 10, "vgg16-cifar": 100}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mosaic_command(args, model, ranks, mode, collective, out, bind):
    images = (2 * args.steps * ranks * args.batch) * 6 // 5 + 12
    return bind + ["mpirun", "-np", str(ranks), "--bind-to", "core" if not bind else "none", args.mosaic, "train",
                   "zoo:" + model, "--data", f"synthetic:{images},3,32,32,{CLASSES[model]}", "--backend", args.backend,
                   "--batch", str(args.batch), "--epochs", "2", "--steps-per-epoch", str(args.steps), "--no-eval",
                   "--threads", "1", "--no-prefetch", "--lr", "0.001", "--distributed", mode, "--collective",
                   collective, "--no-db", "--json", out]


def mosaic_summary(log):
    d = log["distributed"]
    per = d["per_rank"]
    steps = max(1, d["steps"])

    def mean_ms(key):  # per step, averaged over the ranks
        return 1e3 * sum(p[key] for p in per) / len(per) / steps

    return {"images_per_s": log["epochs"][1]["images_per_s"], "hidden_share": d["comm_hidden_share"],
            "collective": d["collective"], "exposed_ms_per_step": mean_ms("comm_exposed_s"),
            "wait_ms_per_step": mean_ms("comm_wait_s"),
            "exposed_work_ms_per_step": mean_ms("comm_exposed_s") - mean_ms("comm_wait_s"),
            "in_backward_ms_per_step": mean_ms("comm_in_backward_s"),
            "sent_mb_per_step": per[0]["bytes_sent"] / steps / 1e6, "gradient_mb": d["gradient_bytes"] / 1e6,
            "buckets": len(d["buckets"]), "per_rank": per}


def mosaic_run(args, model, ranks, mode, collective="auto"):
    env = dict(os.environ, OMP_NUM_THREADS="1", **MPI_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "train.json")
        subprocess.run(mosaic_command(args, model, ranks, mode, collective, out, []), check=True,
                       stdout=subprocess.DEVNULL, env=env)
        with open(out) as f:
            return mosaic_summary(json.load(f))


def mosaic_pair(args, model):
    """The machine's ceiling for 2 ranks: two independent 1-rank trainings at the same time,
    each pinned to its own core (taskset), sharing nothing but the machine. Synchronous
    data-parallel steps at the pace of the slower rank, so it cannot exceed 2 x the slower
    of the two (up to the machine's drift between runs); what it loses below that is
    Mosaic's (communication, synchronisation)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", **MPI_ENV)
    with tempfile.TemporaryDirectory() as tmp:
        outs = [os.path.join(tmp, f"train{c}.json") for c in range(2)]
        procs = [subprocess.Popen(mosaic_command(args, model, 1, "allreduce", "auto", outs[c], ["taskset", "-c", str(c)]),
                                  stdout=subprocess.DEVNULL, env=env) for c in range(2)]
        codes = [p.wait() for p in procs]  # both, so a failure leaves no process behind
        if any(codes):
            raise RuntimeError(f"independent 1-rank run failed ({model}): exit codes {codes}")
        runs = []
        for out in outs:
            with open(out) as f:
                runs.append(mosaic_summary(json.load(f))["images_per_s"])
    return {"images_per_s": 2 * min(runs), "each_images_per_s": runs}


def ddp_worker(rank, world, model_name, batch, steps, port, queue):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(MODELS[model_name]())
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, 3, 32, 32)
    y = torch.randint(0, CLASSES[model_name], (batch,))

    def step():
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(steps):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    secs = time.perf_counter() - t0
    if rank == 0:
        queue.put(world * batch * steps / secs)
    dist.destroy_process_group()


def ddp_run(args, model, ranks, port):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    env_threads = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"
    procs = [ctx.Process(target=ddp_worker, args=(r, ranks, model, args.batch, args.steps, port, queue))
             for r in range(ranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"PyTorch DDP worker failed ({model}, {ranks} processes)")
    if env_threads is None:
        del os.environ["OMP_NUM_THREADS"]
    return {"images_per_s": queue.get()}


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def summarize(repeats):
    """Per configuration, the run of median throughput; ratios are the medians of each
    repeat's own ratios (a repeat's runs follow each other within minutes, so the machine's
    drift cancels in them)."""
    row = {}
    for key in repeats[0]:
        runs = sorted((r[key] for r in repeats), key=lambda x: x["images_per_s"])
        row[key] = runs[len(runs) // 2]

    def ratio(f):
        return median([f(r) for r in repeats])

    row["speedup"] = ratio(lambda r: r["mosaic_n"]["images_per_s"] / r["mosaic_1"]["images_per_s"])
    row["ring_speedup"] = ratio(lambda r: r["mosaic_n_ring"]["images_per_s"] / r["mosaic_1"]["images_per_s"])
    row["blocking_speedup"] = ratio(lambda r: r["mosaic_n_blocking"]["images_per_s"] / r["mosaic_1"]["images_per_s"])
    row["exposed_vs_blocking"] = ratio(lambda r: r["mosaic_n"]["exposed_ms_per_step"] /
                                       max(r["mosaic_n_blocking"]["exposed_ms_per_step"], 1e-9))
    row["exposed_work_vs_blocking"] = ratio(lambda r: r["mosaic_n"]["exposed_work_ms_per_step"] /
                                            max(r["mosaic_n_blocking"]["exposed_work_ms_per_step"], 1e-9))
    if "pair" in repeats[0]:
        row["ceiling_speedup"] = ratio(lambda r: r["pair"]["images_per_s"] / r["mosaic_1"]["images_per_s"])
        row["of_ceiling"] = ratio(lambda r: r["mosaic_n"]["images_per_s"] / r["pair"]["images_per_s"])
    if "ddp_1" in repeats[0]:
        row["ddp_speedup"] = ratio(lambda r: r["ddp_n"]["images_per_s"] / r["ddp_1"]["images_per_s"])
        row["mosaic_vs_ddp"] = ratio(lambda r: r["mosaic_n"]["images_per_s"] / r["ddp_n"]["images_per_s"])
    return row


def table_cells(label, row):
    one, many, ring, blocking = row["mosaic_1"], row["mosaic_n"], row["mosaic_n_ring"], row["mosaic_n_blocking"]
    cells = [label, f"{one['images_per_s']:.1f}", f"{many['images_per_s']:.1f}", f"{row['speedup']:.2f}x",
             f"{ring['images_per_s']:.1f}", f"{row['ring_speedup']:.2f}x",
             f"{blocking['images_per_s']:.1f} ({row['blocking_speedup']:.2f}x)",
             f"{many['in_backward_ms_per_step']:.1f} / {ring['in_backward_ms_per_step']:.1f}",
             f"{many['exposed_ms_per_step']:.1f} / {blocking['exposed_ms_per_step']:.1f} "
             f"({100 * row['exposed_vs_blocking']:.0f}%)",
             f"{many['wait_ms_per_step']:.1f} / {blocking['wait_ms_per_step']:.1f}",
             f"{many['exposed_work_ms_per_step']:.2f} / {blocking['exposed_work_ms_per_step']:.2f} "
             f"({100 * row['exposed_work_vs_blocking']:.0f}%)",
             f"{many['sent_mb_per_step']:.0f} / {ring['sent_mb_per_step']:.0f}"]
    if "pair" in row:
        each = row["pair"]["each_images_per_s"]
        cells += [f"{each[0]:.1f} + {each[1]:.1f}", f"{row['ceiling_speedup']:.2f}x", f"{100 * row['of_ceiling']:.0f}%"]
    else:
        cells += ["-"] * 3
    if "ddp_1" in row:
        cells += [f"{row['ddp_1']['images_per_s']:.1f}", f"{row['ddp_n']['images_per_s']:.1f}",
                  f"{row['ddp_speedup']:.2f}x", f"{row['mosaic_vs_ddp']:.2f}x"]
    else:
        cells += ["-"] * 4
    return cells


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--models", default="vgg16-cifar,alexnet-cifar")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--backend", default="onednn")
    ap.add_argument("--repeats", type=int, default=1, help="run every configuration this many times, interleaved")
    ap.add_argument("--no-pytorch", action="store_true")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the two independent 1-rank runs (2 ranks only)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    args.mosaic = os.path.abspath(args.mosaic)
    n = args.ranks
    rows = []
    print(f"per-process batch {args.batch}, 1 thread per process, {args.steps} measured steps, backend {args.backend}\n")
    header = (f"| model | Mosaic 1 rank img/s | Mosaic {n} ranks img/s | speed-up | ring: {n} ranks img/s | ring speed-up | "
              f"blocking {n} ranks img/s (speed-up) | comm in backward ms/step (shm / ring) | exposed ms/step (overlap / blocking) | "
              f"of which waiting for the other rank | exposed communication without waiting (overlap / blocking) | "
              f"sent MB/step (shm / ring) | two independent 1-rank runs at once, img/s each | ceiling: 2 x the slower / 1 rank | "
              f"Mosaic {n} ranks / ceiling | DDP 1 img/s | DDP {n} img/s | DDP speed-up | Mosaic / DDP at {n} |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    port = 29500 + os.getpid() % 1000
    for model in args.models.split(","):
        repeats = []
        for r in range(args.repeats):
            runs = {"mosaic_1": mosaic_run(args, model, 1, "allreduce"),
                    "mosaic_n": mosaic_run(args, model, n, "allreduce", "shm"),
                    "mosaic_n_ring": mosaic_run(args, model, n, "allreduce", "ring"),
                    "mosaic_n_blocking": mosaic_run(args, model, n, "allreduce-blocking", "shm")}
            if n == 2 and not args.no_ceiling:
                runs["pair"] = mosaic_pair(args, model)
            if not args.no_pytorch:
                runs["ddp_1"] = ddp_run(args, model, 1, port)
                runs["ddp_n"] = ddp_run(args, model, n, port + 1)
                port += 2
            repeats.append(runs)
            if args.repeats > 1:
                print("| " + " | ".join(table_cells(f"{model} (repeat {r + 1})", summarize([runs]))) + " |", flush=True)
        row = summarize(repeats)
        row.update(model=model, ranks=n, batch=args.batch, repeats=repeats)
        rows.append(row)
        label = model if args.repeats == 1 else f"**{model} (median of {args.repeats})**"
        print("| " + " | ".join(table_cells(label, row)) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "settings": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
