#!/usr/bin/env python3
"""What the Python package costs, side by side in one run (issue 32's targets):

1. mosaic.bench from Python against `mosaic bench` on the same model, backend and settings: the
   median iteration time each reports, and the wall time of the whole call (runs alternate).
2. A Python optimizer's step (Lion, examples/python/lion_optimizer.py) on VGG16-CIFAR's
   parameters inside Mosaic (bench --mode training's optimizer stage) against the same
   Lion.step called by a plain Python loop on NumPy arrays of the same sizes, and against the
   C++ Lion plugin (examples/custom_optimizer) in the same stage.
3. A Python operator's crossing: Swish (examples/python/swish_operator.py) as a node, forward
   and backward, against the same NumPy calls outside Mosaic and the C++ plugin's kernel.

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
from swish_operator import MAKE_MODEL, Swish  # noqa: E402


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


def node_us(report, name, direction="median_us"):
    return next(n[direction] for n in report["runs"][0]["nodes"] if n["name"] == name)


def operator_crossing_cost(cli, swish_plugin, batches, rounds, iterations):
    """The Swish node of examples/plugin_custom_op's model: the Python class inside Mosaic
    (forward, and backward in a training step), the same NumPy forward/backward called on an
    array of the same shape outside Mosaic, and the C++ plugin's kernel (CLI, other process)."""
    mosaic.register_operator(Swish)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, MAKE_MODEL, tmp], check=True, stdout=subprocess.DEVNULL)
        model = os.path.join(tmp, "model.onnx")
        out = os.path.join(tmp, "run.json")
        op = Swish({"beta": 1.5})
        for batch in batches:
            inside, inside_bwd, alone, alone_bwd, cpp = [], [], [], [], []
            x = np.random.default_rng(1).standard_normal((batch, 4, 8, 8), dtype=np.float32)
            for _ in range(rounds):
                r = mosaic.bench(model, backends=["naive"], batch=batch, iterations=iterations, warmup=3,
                                 peaks=False, mode="training", check=False)
                inside.append(node_us(r, "swish1"))
                inside_bwd.append(node_us(r, "swish1", "backward_median_us"))
                fwd, bwd = [], []
                for _ in range(iterations):
                    t = time.perf_counter()
                    y = op.forward(x)
                    fwd.append((time.perf_counter() - t) * 1e6)
                    t = time.perf_counter()
                    op.backward((x,), (y,), (y,))
                    bwd.append((time.perf_counter() - t) * 1e6)
                alone.append(statistics.median(fwd))
                alone_bwd.append(statistics.median(bwd))
                if swish_plugin:
                    subprocess.run([cli, "bench", model, "--plugin", swish_plugin, "--backends", "naive", "--batch",
                                    str(batch), "--iterations", str(iterations), "--warmup", "3", "--no-peaks",
                                    "--quiet", "--no-db", "--mode", "training", "--no-check", "--json", out],
                                   check=True, stdout=subprocess.DEVNULL)
                    cpp.append(node_us(json.load(open(out)), "swish1"))
            rows.append({"batch": batch, "elements": int(x.size), "python_in_mosaic_us": statistics.median(inside),
                         "python_backward_in_mosaic_us": statistics.median(inside_bwd),
                         "numpy_alone_us": statistics.median(alone), "numpy_backward_alone_us": statistics.median(alone_bwd),
                         "cpp_plugin_us": statistics.median(cpp) if cpp else None})
    return rows


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
    for c in doc["operator_crossing"]:
        rows.append(f"| Swish forward, {c['elements']} floats (batch {c['batch']}) | {c['python_in_mosaic_us']:.1f} us | "
                    f"NumPy alone {c['numpy_alone_us']:.1f} us; C++ plugin "
                    f"{c['cpp_plugin_us'] or float('nan'):.1f} us | crossing "
                    f"{c['python_in_mosaic_us'] - c['numpy_alone_us']:+.1f} us |")
        rows.append(f"| ... backward | {c['python_backward_in_mosaic_us']:.1f} us | NumPy alone "
                    f"{c['numpy_backward_alone_us']:.1f} us | crossing "
                    f"{c['python_backward_in_mosaic_us'] - c['numpy_backward_alone_us']:+.1f} us |")
    return "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--lion-plugin", default=os.path.join(ROOT, "build", "examples", "custom_optimizer",
                                                          "libmosaic_lion.so"))
    ap.add_argument("--swish-plugin", default=os.path.join(ROOT, "build", "examples", "plugin_custom_op",
                                                           "libmosaic_swish.so"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--json")
    ap.add_argument("--update-docs")
    args = ap.parse_args()
    doc = {"machine_threads": os.cpu_count(),
           "bench_call": bench_call_cost(args.cli, "zoo:alexnet-cifar", "onednn", 16, 60, args.rounds),
           "optimizer_step": optimizer_step_cost(args.cli, args.lion_plugin if os.path.exists(args.lion_plugin) else None,
                                                 "zoo:vgg16-cifar", args.rounds, 10),
           "operator_crossing": operator_crossing_cost(
               args.cli, args.swish_plugin if os.path.exists(args.swish_plugin) else None, [16, 1024], args.rounds, 50)}
    print(table(doc))
    if args.json:
        write_json(args.json, doc)
    if args.update_docs:
        replace_table(args.update_docs, "python-overhead", table(doc), "python_overhead.py")


if __name__ == "__main__":
    main()
