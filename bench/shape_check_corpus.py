#!/usr/bin/env python3
"""The false-alarm rate of bench's shape check against ONNX's own inference (issue 50, item 2),
and its catch rate on the bug it exists for.

Runs `mosaic bench MODEL --backends naive --iterations 1` on every model.onnx below the given
folders (ONNX's node tests, the PyTorch corpora the tests export) and tallies: how many models
ran with the check, how many values it compared and left unknown, and every model where it
stopped the run (each is a disagreement between Mosaic's shape inference and ONNX's: on these
correct models, a false alarm or a Mosaic bug, listed for reading). Models Mosaic refuses for
other reasons (an op it lacks, a symbolic dimension) are counted apart.

    python3 bench/shape_check_corpus.py build/mosaic /usr/share/libonnx-testdata/data/node \\
        build/torch_cases build/sequence_cases build/slice_cases [--json docs/shape_check_corpus.json]
"""
import argparse
import json
import os
import re
import subprocess
import sys


def models(folders):
    for folder in folders:
        for root, _, files in sorted(os.walk(folder)):
            if "model.onnx" in files:
                yield os.path.join(root, "model.onnx")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mosaic")
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--json")
    a = ap.parse_args()
    tally = {"models": 0, "checked": 0, "values_compared": 0, "values_unknown": 0, "stopped": [], "refused_otherwise": 0}
    env = dict(os.environ, MOSAIC_DB="off", MOSAIC_PROGRESS="0")
    for model in models(a.folders):
        tally["models"] += 1
        r = subprocess.run([a.mosaic, "bench", model, "--backends", "naive", "--iterations", "1", "--warmup", "0",
                            "--no-check", "--no-peaks", "--max-seconds", "5"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
        m = re.search(r"shapes: (\d+) values agree with ONNX's own shape inference(?: \((\d+) it leaves unknown\))?", r.stdout)
        if m:
            tally["checked"] += 1
            tally["values_compared"] += int(m.group(1))
            tally["values_unknown"] += int(m.group(2) or 0)
        elif "ONNX's own shape inference" in r.stdout:
            tally["stopped"].append({"model": model, "message": r.stdout.strip().splitlines()[-1]})
        else:
            tally["refused_otherwise"] += 1
    print(f"{tally['models']} models: {tally['checked']} checked ({tally['values_compared']} values compared, "
          f"{tally['values_unknown']} left unknown by ONNX), {len(tally['stopped'])} stopped by the check, "
          f"{tally['refused_otherwise']} refused for other reasons")
    for s in tally["stopped"]:
        print("STOPPED", s["model"], "\n   ", s["message"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(tally, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
