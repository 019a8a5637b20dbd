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

usage: bench/distributed_scaling.py [--mosaic build/mosaic] [--models vgg16-cifar,alexnet-cifar]
                                    [--ranks 2] [--batch 32] [--steps 8] [--backend onednn] [--json F]
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


def mosaic_run(args, model, ranks, mode, collective="auto"):
    images = (2 * args.steps * ranks * args.batch) * 6 // 5 + 12
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "train.json")
        cmd = ["mpirun", "-np", str(ranks), "--bind-to", "core", args.mosaic, "train", "zoo:" + model,
               "--data", f"synthetic:{images},3,32,32,{CLASSES[model]}", "--backend", args.backend,
               "--batch", str(args.batch), "--epochs", "2", "--steps-per-epoch", str(args.steps), "--no-eval",
               "--threads", "1", "--no-prefetch", "--lr", "0.001", "--distributed", mode, "--collective", collective, "--no-db", "--json", out]
        env = dict(os.environ, OMP_NUM_THREADS="1", **MPI_ENV)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        with open(out) as f:
            log = json.load(f)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mosaic", default="build/mosaic")
    ap.add_argument("--models", default="vgg16-cifar,alexnet-cifar")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--backend", default="onednn")
    ap.add_argument("--no-pytorch", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    args.mosaic = os.path.abspath(args.mosaic)
    n = args.ranks
    rows = []
    print(f"per-process batch {args.batch}, 1 thread per process, {args.steps} measured steps, backend {args.backend}\n")
    header = (f"| model | Mosaic 1 rank img/s | Mosaic {n} ranks img/s | speed-up | ring: {n} ranks img/s | ring speed-up | "
              f"blocking {n} ranks img/s | comm in backward ms/step (shm / ring) | exposed ms/step (overlap / blocking) | "
              f"of which waiting for the other rank | exposed communication without waiting (overlap / blocking) | "
              f"sent MB/step (shm / ring) | DDP 1 img/s | DDP {n} img/s | DDP speed-up | Mosaic / DDP at {n} |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    port = 29500 + os.getpid() % 1000
    for model in args.models.split(","):
        one = mosaic_run(args, model, 1, "allreduce")
        many = mosaic_run(args, model, n, "allreduce", "shm")
        ring = mosaic_run(args, model, n, "allreduce", "ring")
        blocking = mosaic_run(args, model, n, "allreduce-blocking", "shm")
        row = {"model": model, "ranks": n, "batch": args.batch, "mosaic_1": one, "mosaic_n": many, "mosaic_n_ring": ring,
               "mosaic_n_blocking": blocking, "speedup": many["images_per_s"] / one["images_per_s"],
               "ring_speedup": ring["images_per_s"] / one["images_per_s"],
               "exposed_vs_blocking": many["exposed_ms_per_step"] / max(blocking["exposed_ms_per_step"], 1e-9),
               "exposed_work_vs_blocking": many["exposed_work_ms_per_step"] /
               max(blocking["exposed_work_ms_per_step"], 1e-9)}
        cells = [model, f"{one['images_per_s']:.1f}", f"{many['images_per_s']:.1f}", f"{row['speedup']:.2f}x",
                 f"{ring['images_per_s']:.1f}", f"{row['ring_speedup']:.2f}x", f"{blocking['images_per_s']:.1f}",
                 f"{many['in_backward_ms_per_step']:.1f} / {ring['in_backward_ms_per_step']:.1f}",
                 f"{many['exposed_ms_per_step']:.1f} / {blocking['exposed_ms_per_step']:.1f}",
                 f"{many['wait_ms_per_step']:.1f} / {blocking['wait_ms_per_step']:.1f}",
                 f"{many['exposed_work_ms_per_step']:.2f} / {blocking['exposed_work_ms_per_step']:.2f} "
                 f"({100 * row['exposed_work_vs_blocking']:.0f}%)",
                 f"{many['sent_mb_per_step']:.0f} / {ring['sent_mb_per_step']:.0f}"]
        if not args.no_pytorch:
            d1 = ddp_run(args, model, 1, port)
            dn = ddp_run(args, model, n, port + 1)
            port += 2
            row.update(ddp_1=d1, ddp_n=dn, ddp_speedup=dn["images_per_s"] / d1["images_per_s"],
                       mosaic_vs_ddp=many["images_per_s"] / dn["images_per_s"])
            cells += [f"{d1['images_per_s']:.1f}", f"{dn['images_per_s']:.1f}", f"{row['ddp_speedup']:.2f}x",
                      f"{row['mosaic_vs_ddp']:.2f}x"]
        else:
            cells += ["-"] * 4
        rows.append(row)
        print("| " + " | ".join(cells) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "settings": vars(args)}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
