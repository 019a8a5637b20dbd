#!/usr/bin/env python3
"""float16 models on the CPU backends, side by side in one bench run per model.

tests/corpus/half's three float16 models (ONNX Runtime's converter applied to corpus exports)
on naive, im2col and onednn with naive as the fallback. Until 2026-12-07 im2col and onednn
declined every float16 node that computes, so their runs were naive's; since then they widen
those nodes around their own float32 kernels (core/promote.hpp promote_float16). The naive
column is what every backend ran before; each row's ratios are naive's median over theirs.

    python3 bench/float16_corpus.py [--mosaic build/mosaic] [--out docs/perf_float16_corpus.json]
"""
import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["resnet_hf.torchscript.float16", "timm_vit.torchscript.float16", "gpt2.dynamo.float16"]
BACKENDS = ["naive", "im2col", "onednn"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mosaic", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "perf_float16_corpus.json"))
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            path = os.path.join(ROOT, "tests", "corpus", "half", "cases", model, "model.onnx")
            out = os.path.join(tmp, model + ".json")
            cmd = [args.mosaic, "bench", path, "--backends", ",".join(BACKENDS), "--fallback", "naive",
                   "--rtol", "1e-2", "--atol", "1e-3", "--warmup", "3", "--iterations", str(args.iterations),
                   "--repeats", str(args.repeats), "--no-peaks", "--no-db", "--json", out]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                runs = json.load(f)["runs"]
            medians = {r["label"]: r["iteration_ms"]["median"] for r in runs}
            on = {r["label"]: sum(n["backend"] == r["label"] for n in r["nodes"]) for r in runs}
            nodes = len(runs[0]["nodes"])
            checks = {r["label"]: r["check"]["passed"] for r in runs if "check" in r}
            rows.append({"model": model, "median_ms": medians, "nodes": nodes, "nodes_on_backend": on,
                         "check_passed": checks,
                         "speedup_over_naive": {b: medians["naive"] / medians[b] for b in BACKENDS}})
            print(model, " ".join(f"{b} {medians[b]:.3f} ms ({medians['naive'] / medians[b]:.2f}x, "
                                  f"{on[b]}/{nodes} nodes)" for b in BACKENDS))
    doc = {"what": __doc__.splitlines()[0], "command": "python3 bench/float16_corpus.py", "rows": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
