#!/usr/bin/env python3
"""What the Python package costs, side by side in one run (issue 32's targets):

1. mosaic.bench from Python against `mosaic bench` on the same model, backend and settings: the
   median iteration time each reports, and the wall time of the whole call (runs alternate).
2. A Python optimizer's step (Lion, examples/python/lion_optimizer.py) on VGG16-CIFAR's
   parameters inside Mosaic (bench --mode training's optimizer stage) against the same
   Lion.step called by a plain Python loop on NumPy arrays of the same sizes, and against the
   C++ Lion plugin (examples/custom_optimizer) in the same stage.

    PYTHONPATH=build/python python3 bench/python_overhead.py [--json docs/perf_python.json]
        [--update-docs docs/python.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
os.environ.setdefault("MOSAIC_DB", "off")

import mosaic  # noqa: E402
from bench_docs import replace_table, write_json  # noqa: E402
from lion_optimizer import Lion  # noqa: E402


def bench_call_cost(cli, model, backend, batch, iterations, rounds):
    """Median iteration time and wall time of the same bench from Python and from the CLI."""
    py_iter, cli_iter, py_wall, cli_wall = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        for _ in range(rounds):
            t = time.perf_counter()
            r = mosaic.bench(model, backends=[backend], batch=batch, iterations=iterations, warmup=5, peaks=False)
            py_wall.append(time.perf_counter() - t)
            py_iter.append(r["runs"][0]["iteration_ms"]["median"])
            t = time.perf_counter()
            subprocess.run([cli, "bench", model, "--backends", backend, "--batch", str(batch), "--iterations",
                            str(iterations), "--warmup", "5", "--no-peaks", "--quiet", "--no-db", "--json", out],
                           check=True, stdout=subprocess.DEVNULL)
            cli_wall.append(time.perf_counter() - t)
            cli_iter.append(json.load(open(out))["runs"][0]["iteration_ms"]["median"])
    return {"model": model, "backend": backend, "batch": batch, "iterations": iterations, "rounds": rounds,
            "python_iteration_ms": statistics.median(py_iter), "cli_iteration_ms": statistics.median(cli_iter),
            "python_wall_s": statistics.median(py_wall), "cli_wall_s": statistics.median(cli_wall)}


def parameter_sizes(cli, model):
    import onnx
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        subprocess.run([cli, "export", model.split(":", 1)[1], "-o", path], check=True, stdout=subprocess.DEVNULL)
        m = onnx.load(path)
        return [int(np.prod(t.dims)) for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]


def optimizer_step_cost(cli, lion_plugin, model, rounds, iterations):
    """optimizer_ms of bench --mode training with the Python Lion, the C++ Lion, and the same
    Python arithmetic on NumPy arrays outside Mosaic."""
    mosaic.register_optimizer(Lion)
    if lion_plugin and "lion" not in mosaic.optimizers():
        mosaic.load_optimizer_plugin(lion_plugin)
    sizes = parameter_sizes(cli, model)
    rng = np.random.default_rng(1)
    params = [rng.standard_normal(n, dtype=np.float32) for n in sizes]
    grads = [rng.standard_normal(n, dtype=np.float32) for n in sizes]
    states = [{"exp_avg": np.zeros(n, np.float32)} for n in sizes]
    opt = Lion({"lr": 1e-4, "weight_decay": 0.0})
    inside, cpp, numpy_only = [], [], []
    for _ in range(rounds):
        common = dict(backends=["onednn"], batch=1, mode="training", iterations=iterations, warmup=2, peaks=False,
                      check=False)
        r = mosaic.bench(model, optimizer=Lion.name, **common)
        inside.append(r["runs"][0]["summary"]["optimizer_ms"])
        if lion_plugin:
            r = mosaic.bench(model, optimizer="lion", **common)
            cpp.append(r["runs"][0]["summary"]["optimizer_ms"])
        samples = []
        for t in range(1, iterations + 1):
            start = time.perf_counter()
            for p, g, s in zip(params, grads, states):
                opt.step(p, g, s, t)
            samples.append((time.perf_counter() - start) * 1e3)
        numpy_only.append(statistics.median(samples))
    return {"model": model, "parameters": len(sizes), "elements": int(sum(sizes)), "rounds": rounds,
            "python_in_mosaic_ms": statistics.median(inside), "numpy_alone_ms": statistics.median(numpy_only),
            "cpp_plugin_ms": statistics.median(cpp) if cpp else None}


def table(doc):
    b, o = doc["bench_call"], doc["optimizer_step"]
    rows = [
        "| what | Python | reference | ratio |",
        "|---|---|---|---|",
        f"| `mosaic.bench` {b['model']} {b['backend']} b{b['batch']}: median iteration | "
        f"{b['python_iteration_ms']:.2f} ms | CLI {b['cli_iteration_ms']:.2f} ms | "
        f"{b['python_iteration_ms'] / b['cli_iteration_ms']:.3f} |",
        f"| ... wall time of the whole call | {b['python_wall_s']:.2f} s | CLI {b['cli_wall_s']:.2f} s | "
        f"{b['python_wall_s'] / b['cli_wall_s']:.3f} |",
        f"| Lion step on {o['model']} ({o['parameters']} tensors, {o['elements'] / 1e6:.1f} M floats) | "
        f"{o['python_in_mosaic_ms']:.2f} ms | NumPy alone {o['numpy_alone_ms']:.2f} ms | "
        f"{o['python_in_mosaic_ms'] / o['numpy_alone_ms']:.3f} |",
    ]
    if o["cpp_plugin_ms"]:
        rows.append(f"| ... the C++ Lion plugin, same stage | | {o['cpp_plugin_ms']:.2f} ms | "
                    f"{o['python_in_mosaic_ms'] / o['cpp_plugin_ms']:.2f}x slower in Python |")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--lion-plugin", default=os.path.join(ROOT, "build", "examples", "custom_optimizer",
                                                          "libmosaic_lion.so"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--json")
    ap.add_argument("--update-docs")
    args = ap.parse_args()
    doc = {"machine_threads": os.cpu_count(),
           "bench_call": bench_call_cost(args.cli, "zoo:alexnet-cifar", "onednn", 16, 60, args.rounds),
           "optimizer_step": optimizer_step_cost(args.cli, args.lion_plugin if os.path.exists(args.lion_plugin) else None,
                                                 "zoo:vgg16-cifar", args.rounds, 10)}
    print(table(doc))
    if args.json:
        write_json(args.json, doc)
    if args.update_docs:
        replace_table(args.update_docs, "python-overhead", table(doc), "python_overhead.py")


if __name__ == "__main__":
    main()
