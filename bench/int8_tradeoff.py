#!/usr/bin/env python3
"""int8 against float32 as a trade-off, accuracy next to speed (issue 52, items 3 and 4).

1. Accuracy: fmnist-cnn trained on Fashion-MNIST for --epochs (float32, onednn, Adam), saved,
   then quantised by `mosaic quantize` with each calibration method (minmax, percentile,
   entropy) on 512 training images: test accuracy of the float32 and int8 models over the
   10,000 test images, their top-1 agreement, output SQNR and the first node below 20 dB.
2. Speed: `bench --precision int8` at --batch (64) on --backends: each configuration and its
   int8 twin (the QDQ model) side by side in one run, random weights calibrated on random
   inputs; the twin's top-1 agreement and SQNR against float32 over the batch.
3. Peer (when onnxruntime imports): ONNX Runtime on the trained model's float32 and QDQ
   forms over the same test images: its int8 accuracy, its agreement with Mosaic's int8
   classes, and its own float32 and int8 times at --batch; and per model of --models, the
   model's float32 and QDQ files timed in ONNX Runtime beside Mosaic's onednn on the QDQ
   file, --rounds interleaved rounds.

usage: bench/int8_tradeoff.py [--mosaic build/mosaic] [--models fmnist-cnn,alexnet-cifar,vgg16-cifar]
         [--backends onednn,im2col] [--batch 64] [--epochs 2] [--json docs/perf_int8.json]
         [--update-docs docs/performance.md] [--speed-only]
--speed-only: parts 2 and 3's timings alone (no training, no accuracy, no table), for a
quick side-by-side rerun of the speed rows into --json.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_docs  # noqa: E402
from bench_docs import replace_table, write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, cmd):
    """Runs `mosaic CMD --json TMP` and returns the document."""
    return bench_docs.mosaic_json(args.mosaic, cmd, "int8_tradeoff")


def accuracy(args, work):
    model = os.path.join(work, "fmnist.onnx")
    log = run(args, ["train", "zoo:fmnist-cnn", "--data", "fashion-mnist", "--backend", "onednn", "--optimizer", "adam",
                     "--lr", "0.002", "--batch", "64", "--epochs", str(args.epochs), "--seed", "1", "--save", model,
                     "--no-db"])
    out = {"train_test_accuracy": log["epochs"][-1]["test_accuracy"], "methods": {}}
    for method in ("minmax", "percentile", "entropy"):
        q = os.path.join(work, f"fmnist_{method}.onnx")
        r = run(args, ["quantize", model, "--data", "fashion-mnist", "--method", method, "--backend", "onednn",
                       "-o", q])
        out["methods"][method] = {"accuracy": r["accuracy"], "output_sqnr_db": r["output_sqnr_db"],
                                  "first_noisy": r["first_noisy"], "nodes": len(r["nodes"]), "model": q}
    out["float_model"] = model
    return out


def speed(args, model):
    cmd = ["bench", "zoo:" + model, "--backends", args.backends, "--precision", "int8", "--batch", str(args.batch),
           "--no-peaks", "--no-db", "--warmup", "5", "--iterations", "30"]
    doc = run(args, cmd)
    runs = {r["label"]: r for r in doc["runs"]}
    out = {}
    for b in args.backends.split(","):
        f, q = runs[b], runs[b + "-int8"]
        out[b] = {"f32_ms": f["summary"]["median_ms"], "int8_ms": q["summary"]["median_ms"],
                  "speedup": f["summary"]["median_ms"] / q["summary"]["median_ms"],
                  "top1_agreement": q["check"]["top1_agreement"], "sqnr_db": q["check"]["sqnr_db"],
                  "check_passed": q["check"]["passed"],
                  "contended": bool(f["summary"].get("contended") or q["summary"].get("contended"))}
    return out


def ort_speed(args, model, work):
    """The same model's float32 and int8 QDQ forms (`mosaic export`, `mosaic quantize` on random
    inputs) in ONNX Runtime (all graph optimisations: it fuses the QDQ groups into its integer
    kernels) and in Mosaic's onednn, which rewrites them into QLinearConv and QGemm (core/fuse_qdq.cpp),
    interleaved: median ms at --batch."""
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        return {"skipped": f"onnxruntime not importable ({e})"}
    f32, q = os.path.join(work, model + ".onnx"), os.path.join(work, model + "_int8.onnx")
    r = subprocess.run([args.mosaic, "export", model, "-o", f32], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"int8_tradeoff: mosaic export {model} failed: {r.stdout}{r.stderr}")
    run(args, ["quantize", f32, "-o", q, "--no-evaluate", "--batch", str(args.batch)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count()
    sessions = {k: ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"]) for k, p in (("f32", f32), ("int8", q))}
    inp = sessions["f32"].get_inputs()[0]
    shape = [args.batch] + [d if isinstance(d, int) else 1 for d in inp.shape[1:]]
    x = np.random.default_rng(0).uniform(-1, 1, size=shape).astype(np.float32)
    out = {"onnxruntime": ort.__version__}
    times = {"f32": [], "int8": []}
    for k, s in sessions.items():
        for _ in range(3):
            s.run(None, {inp.name: x})
    for _ in range(args.rounds):
        for k, s in sessions.items():
            for _ in range(10):
                t = time.perf_counter()
                s.run(None, {inp.name: x})
                times[k].append(time.perf_counter() - t)
        doc = run(args, ["bench", q, "--backends", "onednn", "--batch", str(args.batch), "--no-peaks", "--no-db",
                         "--warmup", "3", "--iterations", "10"])
        times.setdefault("mosaic_int8", []).append(doc["runs"][0]["summary"]["median_ms"] / 1e3)
    for k, v in times.items():
        out[k + "_ms"] = 1e3 * sorted(v)[len(v) // 2]
    return out


def peer(args, acc):
    """ONNX Runtime on the trained float32 model and its minmax QDQ form, over the test set."""
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        return {"skipped": f"onnxruntime not importable ({e})"}
    import gzip
    import struct
    base = "/usr/share/datasets/fashion-mnist"
    def idx(name):
        path = os.path.join(base, name)
        opener = gzip.open if not os.path.exists(path) else open
        with opener(path if os.path.exists(path) else path + ".gz", "rb") as f:
            data = f.read()
        dims = data[3]
        shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
        return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    x = idx("t10k-images-idx3-ubyte").astype(np.float32).reshape(-1, 1, 28, 28) / 255.0
    y = idx("t10k-labels-idx1-ubyte").astype(np.int64)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count()
    out = {"onnxruntime": ort.__version__}
    classes = {}
    for name, path in (("f32", acc["float_model"]), ("int8", acc["methods"]["minmax"]["model"])):
        s = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        inp = s.get_inputs()[0].name
        preds = np.concatenate([s.run(None, {inp: x[i:i + 500]})[0].argmax(1) for i in range(0, len(x), 500)])
        classes[name] = preds
        batch = x[:args.batch]
        for _ in range(5):
            s.run(None, {inp: batch})
        times = []
        for _ in range(30):
            t = time.perf_counter()
            s.run(None, {inp: batch})
            times.append(time.perf_counter() - t)
        out[name] = {"accuracy": float((preds == y).mean()), "median_ms": 1e3 * sorted(times)[len(times) // 2]}
    out["int8_top1_agreement_with_f32"] = float((classes["f32"] == classes["int8"]).mean())
    return out


def markdown(doc):
    a = doc["accuracy"]
    lines = [f"int8 against float32, {doc['cpu']}, `bench/int8_tradeoff.py`, {doc['date'][:10]}.", "",
             f"Accuracy: fmnist-cnn trained {doc['epochs']} epochs (float32, Adam; test accuracy "
             f"{a['train_test_accuracy']:.4f}), quantised by `mosaic quantize` on 512 training images (weights int8 "
             f"per channel, activations uint8), both models over the 10,000 test images:", "",
             "| calibration | float32 accuracy | int8 accuracy | change | top-1 agreement | output SQNR | first node below 20 dB |",
             "|---|---|---|---|---|---|---|"]
    for m, r in a["methods"].items():
        acc = r["accuracy"]
        lines.append(f"| {m} | {acc['f32']:.4f} | {acc['int8']:.4f} | {100 * (acc['int8'] - acc['f32']):+.2f} points | "
                     f"{100 * acc['top1_agreement']:.2f}% | {r['output_sqnr_db']:.1f} dB | {r['first_noisy'] or 'none'} |")
    p = doc.get("peer", {})
    if "int8" in p:
        lines += ["", f"ONNX Runtime {p['onnxruntime']} on the same float32 model and its minmax QDQ form: accuracy "
                  f"{p['f32']['accuracy']:.4f} and {p['int8']['accuracy']:.4f} (its int8 classes agree with its float32 "
                  f"ones on {100 * p['int8_top1_agreement_with_f32']:.2f}% of the images); at batch {doc['batch']} "
                  f"{p['f32']['median_ms']:.2f} ms float32 and {p['int8']['median_ms']:.2f} ms int8."]
    elif p:
        lines += ["", f"ONNX Runtime: {p.get('skipped')}."]
    lines += ["", f"Speed: `bench --precision int8 --batch {doc['batch']}` (random weights calibrated on random inputs), "
              "each backend and its int8 twin side by side in one run; the twin's agreement and SQNR are against "
              "float32's outputs over the batch:", "",
              "| model | backend | float32 ms | int8 (QDQ) ms | int8 speed | top-1 agreement | output SQNR |",
              "|---|---|---|---|---|---|---|"]
    for m, per in doc["speed"].items():
        for b, r in per.items():
            sq = r["sqnr_db"]
            lines.append(f"| {m} | {b} | {r['f32_ms']:.1f} | {r['int8_ms']:.1f} | {r['speedup']:.2f}x"
                         f"{' (contended)' if r['contended'] else ''} | {100 * r['top1_agreement']:.0f}% | "
                         f"{sq if isinstance(sq, str) else f'{sq:.1f}'} dB |")
    ps = doc.get("peer_speed", {})
    if any("int8_ms" in r for r in ps.values()):
        lines += ["", f"Beside ONNX Runtime (all graph optimisations, its integer kernels for the QDQ groups) on the "
                  f"same files at batch {doc['batch']} (`mosaic export`, `mosaic quantize` on random inputs), "
                  f"interleaved rounds; Mosaic's int8 column is onednn on the QDQ file:", "",
                  "| model | ONNX Runtime float32 ms | ONNX Runtime int8 ms | Mosaic onednn int8 ms | Mosaic int8 / ONNX Runtime int8 |",
                  "|---|---|---|---|---|"]
        for m, r in ps.items():
            if "int8_ms" in r:
                lines.append(f"| {m} | {r['f32_ms']:.1f} | {r['int8_ms']:.1f} | {r['mosaic_int8_ms']:.1f} | "
                             f"**{r['int8_ms'] / r['mosaic_int8_ms']:.2f}x** |")
    return "\n".join(lines) + "\n"


def speed_only(args, doc):
    """Parts 2 and 3's timings, printed as one line per model and written to --json."""
    doc["speed"] = {m: speed(args, m) for m in args.models.split(",")}
    with tempfile.TemporaryDirectory() as work:
        doc["peer_speed"] = {m: ort_speed(args, m, work) for m in args.models.split(",")}
    for m, per in doc["speed"].items():
        row = ", ".join(f"{b} {r['f32_ms']:.1f} -> {r['int8_ms']:.1f} ms ({r['speedup']:.2f}x)" for b, r in per.items())
        ps = doc["peer_speed"].get(m, {})
        if "int8_ms" in ps:
            row += (f"; ONNX Runtime {ps['f32_ms']:.1f} -> {ps['int8_ms']:.1f} ms, Mosaic onednn int8 "
                    f"{ps['mosaic_int8_ms']:.1f} ms ({ps['int8_ms'] / ps['mosaic_int8_ms']:.2f}x ONNX Runtime's int8)")
        print(f"{m}: {row}")
    if args.json:
        write_json(args.json, doc)
    return 1 if any(not r["check_passed"] for per in doc["speed"].values() for r in per.values()) else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mosaic", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--models", default="fmnist-cnn,alexnet-cifar,vgg16-cifar")
    ap.add_argument("--backends", default="onednn,im2col")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the ONNX Runtime comparison")
    ap.add_argument("--json", default="")
    ap.add_argument("--update-docs", default="", help="replace the table between the int8 markers of this file")
    ap.add_argument("--speed-only", action="store_true", help="the speed rows alone: no training or accuracy, no table")
    args = ap.parse_args()
    if args.speed_only and args.update_docs:
        sys.exit("int8_tradeoff: --speed-only writes no table: give --json instead of --update-docs")
    if not os.access(args.mosaic, os.X_OK):
        sys.exit(f"int8_tradeoff: {args.mosaic} not found: build Mosaic first (scripts/setup.sh)")
    doc = {"schema": "mosaic.int8/1", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "cpu": bench_docs.cpu_description(), "batch": args.batch, "epochs": args.epochs}
    with tempfile.TemporaryDirectory() as work:
        if args.speed_only:
            return speed_only(args, doc)
        doc["accuracy"] = accuracy(args, work)
        doc["peer"] = peer(args, doc["accuracy"])
        for r in doc["accuracy"]["methods"].values():
            r.pop("model")
        doc["accuracy"].pop("float_model")
    doc["speed"] = {m: speed(args, m) for m in args.models.split(",")}
    with tempfile.TemporaryDirectory() as work:
        doc["peer_speed"] = {m: ort_speed(args, m, work) for m in args.models.split(",")}
    table = markdown(doc)
    print(table)
    if args.json:
        write_json(args.json, doc)
    if args.update_docs:
        replace_table(args.update_docs, "int8", table, "int8_tradeoff")
    failed = [m for m, per in doc["speed"].items() for r in per.values() if not r["check_passed"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
