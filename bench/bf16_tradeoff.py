#!/usr/bin/env python3
"""bf16 against float32 as a trade-off, speed next to accuracy (issue: peers and bf16).

Three measurements, each float32 and bf16 side by side in one Mosaic run (onednn):

1. Speed: `bench --precision both` at --batch (64), inference and training (mixed
   precision: bf16 products forward and backward, float32 parameters and optimizer state),
   the median step of each; no naive check here (that is 2.).
2. Error against the float32 naive oracle at --check-batch (16): inference outputs (share of
   the output scale, top-1 agreement over the batch) and training (loss error, the largest
   relative L2 distance of a parameter gradient).
3. Learning: `train` on Fashion-MNIST for --epochs with the same seed in both precisions: the
   test accuracy, the mean training loss over the last 100 steps, and the trained bf16
   model's top-1 agreement with its float32 inference over the 10,000 test images.

usage: bench/bf16_tradeoff.py [--mosaic build/mosaic] [--models fmnist-cnn,alexnet-cifar,vgg16-cifar]
         [--batch 64] [--check-batch 16] [--epochs 2] [--json docs/perf_bf16.json]
         [--update-docs docs/performance.md]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_docs  # noqa: E402
from bench_docs import replace_table, write_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mosaic_json(args, cmd):
    """Runs `mosaic CMD --no-db --json TMP` and returns the document."""
    return bench_docs.mosaic_json(args.mosaic, cmd + ["--no-db"], "bf16_tradeoff")


def by_precision(doc):
    return {run["precision"]: run for run in doc["runs"]}


def contended(run):
    return bool((run.get("summary") or {}).get("contended"))


def speed(args, model, mode):
    cmd = ["bench", "zoo:" + model, "--backends", "onednn", "--precision", "both", "--batch", str(args.batch),
           "--mode", mode, "--no-check", "--no-peaks", "--warmup", "3" if mode == "training" else "10",
           "--iterations", "15" if mode == "training" else "50"]
    runs = by_precision(mosaic_json(args, cmd))
    f32, bf16 = runs["f32"]["summary"]["median_ms"], runs["bf16"]["summary"]["median_ms"]
    return {"f32_ms": f32, "bf16_ms": bf16, "speedup": f32 / bf16,
            "contended": contended(runs["f32"]) or contended(runs["bf16"])}


def error(args, model, mode):
    cmd = ["bench", "zoo:" + model, "--backends", "onednn", "--precision", "bf16", "--batch", str(args.check_batch),
           "--mode", mode, "--no-peaks", "--warmup", "1", "--iterations", "2"]
    check = mosaic_json(args, cmd)["runs"][0]["check"]
    out = {"passed": check["passed"], "max_abs_error": check["max_abs_error"], "max_rel_error": check["max_rel_error"]}
    if "top1_agreement" in check:
        out["top1_agreement"] = check["top1_agreement"]
    return out


def learning(args):
    out = {}
    for precision in ("f32", "bf16"):
        log = mosaic_json(args, ["train", "zoo:fmnist-cnn", "--data", "fashion-mnist", "--backend", "onednn",
                                 "--epochs", str(args.epochs), "--seed", "1", "--precision", precision])
        steps = [s["loss"] for s in log["steps"]]
        out[precision] = {"test_accuracy": log["epochs"][-1]["test_accuracy"],
                          "last100_loss": sum(steps[-100:]) / len(steps[-100:]),
                          "images_per_s": sum(e["images_per_s"] for e in log["epochs"]) / len(log["epochs"]),
                          "bf16": log.get("bf16")}
    return out


def markdown(doc):
    lines = [f"bf16 against float32, onednn, {doc['cpu']}, `bench/bf16_tradeoff.py`, {doc['date'][:10]}. Speed: "
             f"median step at batch {doc['batch']} (inference and mixed-precision training), both precisions in one "
             f"run. Error: against the float32 naive oracle at batch {doc['check_batch']} (inference: share of the "
             f"output's scale, top-1 agreement over the batch; training: the largest relative L2 distance of a "
             f"parameter gradient).", "",
             "| model | inference f32 / bf16 ms | speed-up | training f32 / bf16 ms | speed-up | inference error, top-1 | "
             "training gradient error |", "|---|---|---|---|---|---|---|"]
    for m, r in doc["models"].items():
        i, t, ei, et = r["inference"], r["training"], r["inference_error"], r["training_error"]
        mark = lambda x: " (contended)" if x["contended"] else ""
        lines.append(f"| {m} | {i['f32_ms']:.1f} / {i['bf16_ms']:.1f} | {i['speedup']:.2f}x{mark(i)} | "
                     f"{t['f32_ms']:.1f} / {t['bf16_ms']:.1f} | {t['speedup']:.2f}x{mark(t)} | "
                     f"{100 * ei['max_rel_error']:.2f}%, {100 * ei.get('top1_agreement', -1):.0f}% | "
                     f"{100 * et['max_rel_error']:.1f}% |")
    learn = doc["learning"]
    b = learn["bf16"]["bf16"] or {}
    lines += ["", f"Fashion-MNIST, `train zoo:fmnist-cnn --epochs {doc['epochs']} --seed 1` in each precision: test "
              f"accuracy {learn['f32']['test_accuracy']:.4f} (float32) and {learn['bf16']['test_accuracy']:.4f} (bf16); "
              f"mean loss of the last 100 steps {learn['f32']['last100_loss']:.4f} and {learn['bf16']['last100_loss']:.4f}; "
              f"{learn['f32']['images_per_s']:.0f} and {learn['bf16']['images_per_s']:.0f} images/s. The bf16-trained "
              f"model's bf16 and float32 inferences agree on {100 * b.get('top1_agreement', 0):.2f}% of the "
              f"{b.get('rows', 0)} test images (accuracy {b.get('test_accuracy_bf16', 0):.4f} and "
              f"{b.get('test_accuracy_f32', 0):.4f})."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mosaic", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--models", default="fmnist-cnn,alexnet-cifar,vgg16-cifar")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--check-batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--json", default="")
    ap.add_argument("--update-docs", default="", help="replace the table between the bf16 markers of this file")
    args = ap.parse_args()
    if not os.access(args.mosaic, os.X_OK):
        sys.exit(f"bf16_tradeoff: {args.mosaic} not found: build Mosaic first (scripts/setup.sh)")
    doc = {"schema": "mosaic.bf16/1", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "cpu": bench_docs.cpu_description(), "batch": args.batch, "check_batch": args.check_batch,
           "epochs": args.epochs, "models": {}}
    for m in args.models.split(","):
        doc["models"][m] = {"inference": speed(args, m, "inference"), "training": speed(args, m, "training"),
                            "inference_error": error(args, m, "inference"),
                            "training_error": error(args, m, "training")}
    doc["learning"] = learning(args)
    table = markdown(doc)
    print(table)
    if args.json:
        write_json(args.json, doc)
    if args.update_docs:
        replace_table(args.update_docs, "bf16", table, "bf16_tradeoff")
    failed = [m for m, r in doc["models"].items() if not (r["inference_error"]["passed"] and r["training_error"]["passed"])]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
