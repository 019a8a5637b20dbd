#!/usr/bin/python3
"""onednn's small-tensor limits: oneDNN's primitives against Mosaic's loops, op by op and size by size.

Below a limit the onednn backend runs element-wise ops, Concat and MatMul with Mosaic's own
loops (backends/common/eltwise_loops.hpp, backends/common/gemv.hpp) instead of a oneDNN
primitive, whose fixed cost per call (argument map, stream wait, thread fork) dominates on
small tensors. This script measures where the crossing is: for each op and size it writes a
one-node ONNX model and times its node with `mosaic bench --backends onednn` under
MOSAIC_ONEDNN_LOOPS=never (primitives) and =always (loops), interleaved round by round.
Prints a Markdown table of the node's median microseconds, the ratio, and the limit the
backend uses for that op.

usage: bench/small_ops.py [--mosaic build/mosaic] [--threads 2] [--rounds 3] [--json docs/perf_small_ops.json]
Needs the onnx Python package (Debian's python3-onnx is enough).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

# (label, op, input shapes, limit the backend uses) per family; sizes span the limits.
ELTWISE_SIZES = [1024, 4096, 16384, 65536, 262144]
GEMM_SIZES = [(8, 32, 32), (16, 64, 32), (32, 64, 64), (48, 64, 64), (64, 128, 64), (128, 128, 128)]


def cases():
    out = []
    for n in ELTWISE_SIZES:
        out.append(("Add", f"Add [{n}] + [{n}]", "Add", [[n], [n]], "65,536 elements"))
        out.append(("Mul", f"Mul [{n // 64}, 64] * [64]", "Mul", [[n // 64, 64], [64]], "65,536 elements"))
        out.append(("Relu", f"Relu [{n}]", "Relu", [[n]], "65,536 elements"))
        out.append(("Sigmoid", f"Sigmoid [{n}]", "Sigmoid", [[n]], "256 elements"))
        out.append(("Gelu", f"Gelu [{n}]", "Gelu", [[n]], "256 elements"))
        out.append(("Concat", f"Concat 2 x [{n // 128}, 64]", "Concat", [[n // 128, 64], [n // 128, 64]],
                    "262,144 elements"))
    for m, k, n in GEMM_SIZES:
        out.append(("MatMul", f"MatMul [{m}, {k}] x [{k}, {n}] ({m * k * n:,} MACs)", "MatMul", [[m, k], [k, n]],
                    "131,072 multiply-adds"))
    return out


def model(op, shapes, path):
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, s) for i, s in enumerate(shapes)]
    attrs = {"axis": 1} if op == "Concat" else {}
    names = [f"x{i}" for i in range(len(shapes))]
    inits = []
    if op == "MatMul":  # weights as a constant, as in a Linear layer
        inputs = inputs[:1]
        w = np.random.default_rng(0).uniform(-1, 1, shapes[1]).astype(np.float32)
        inits = [numpy_helper.from_array(w, "x1")]
    node = helper.make_node(op, names, ["y"], name="op", **attrs)
    g = helper.make_graph([node], "small", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    opset = 20 if op == "Gelu" else 17
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.save(m, path)


def node_us(mosaic, path, loops, threads, iterations):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([mosaic, "bench", path, "--backends", "onednn", "--threads", str(threads), "--warmup", "20",
                        "--iterations", str(iterations), "--no-check", "--no-db", "--no-peaks", "--json", f.name],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, MOSAIC_ONEDNN_LOOPS=loops, MOSAIC_PROGRESS="0"))
        run = json.load(open(f.name))["runs"][0]
        node = [n for n in run["nodes"] if n["name"] == "op"][0]
        return node["median_us"], node["backend"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mosaic", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "mosaic"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family, label, op, shapes, limit in cases():
            path = os.path.join(tmp, "m.onnx")
            model(op, shapes, path)
            times = {"never": [], "always": []}
            for _ in range(args.rounds):
                for loops in ("never", "always"):
                    us, backend = node_us(args.mosaic, path, loops, args.threads, args.iterations)
                    if backend != "onednn":
                        sys.exit(f"small_ops: {label} ran on {backend} under MOSAIC_ONEDNN_LOOPS={loops}")
                    times[loops].append(us)
            prim, loop = statistics.median(times["never"]), statistics.median(times["always"])
            rows.append({"family": family, "case": label, "primitive_us": prim, "loop_us": loop,
                         "primitive_rounds": times["never"], "loop_rounds": times["always"], "limit": limit})
            print(f"{label}: primitive {prim:.1f} us, loop {loop:.1f} us", file=sys.stderr)
    print(f"Node median us (median of {args.rounds} interleaved rounds, {args.iterations} iterations each), "
          f"{args.threads} threads; `bench/small_ops.py`.\n")
    print("| case | oneDNN primitive us | Mosaic loop us | primitive / loop | onednn's limit |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['primitive_us']:.1f} | {r['loop_us']:.1f} | "
              f"{r['primitive_us'] / r['loop_us']:.2f}x | {r['limit']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "mosaic.small_ops/1", "threads": args.threads, "rounds": args.rounds,
                       "iterations": args.iterations, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
